/**
 * Row 9: the scheduler with 10,000 mounted jobs, 1,000 of them due in the same
 * second. A dedicated instance (its own namespace) gets a no-op handler that
 * records, per call, the job and the scheduler clock's time. The 1,000 due jobs
 * fire every 5 s ("*\/5 * * * * *"); the other 9,000 fire daily, 12 hours away
 * (so their timers stay below setTimeout's 24.8-day limit).
 * Lateness of a call = its time − the tick it belongs to (the 5 s boundary at
 * or before it; a tick more than 5 s late would be a misfire and not run).
 */
import type { RunContext } from "../dist/cron/handlers.js";
import type { JobRecord } from "../dist/cron/job.js";
import { systemKeys } from "../dist/redis/keys.js";
import { startBenchApp, type BenchApp } from "./env.js";
import type { Ctx } from "./throughput.js";
import { log, percentile, pool, sleep, waitFor } from "./lib.js";

const NAMESPACE = "bench-cron";

export interface SchedulerShape {
  jobs: number;
  due: number;
  periodSec: number;
}

export interface TickResult {
  tickMs: number;
  p50: number;
  p99: number;
  max: number;
  runs: number;
  distinctJobs: number;
}

export class SchedulerBench {
  private sy?: BenchApp;
  private calls: { job: string; at: number }[] = [];
  private dueIds = new Set<string>();
  setupMs = 0;

  constructor(
    private readonly ctx: Ctx,
    private readonly shape: SchedulerShape,
  ) {}

  /** Seconds the API took to create and resume the due jobs. */
  apiSec = 0;

  /**
   * The due jobs go through the API (CreateJob + ResumeJob). The idle ones are
   * written straight into the job hash, in the store's JobRecord format, and
   * mounted with scheduler.resync(): CreateJob currently reads every job to
   * count them, so 10,000 creates through the API would take many minutes
   * (see the benchmark notes); the row measures ticks, not creation.
   */
  async setup(): Promise<void> {
    const t0 = Date.now();
    this.sy = await startBenchApp(this.ctx.redis.socketPath, {
      config: { namespace: NAMESPACE },
      handlers: {
        BenchNoop: async (rc: RunContext) => {
          this.calls.push({ job: rc.jobId, at: rc.clock.now() });
          return "";
        },
      },
    });
    const { client, app } = this.sy;
    const every = `*/${this.shape.periodSec} * * * * *`;
    await pool(this.shape.due, 50, async (i) => {
      const job = await client.createJob({ name: `bench due ${i}`, target: "BenchNoop", schedule: every, timeZone: "UTC" });
      await client.resumeJob(job.id);
      this.dueIds.add(job.id);
    });
    this.apiSec = (Date.now() - t0) / 1000;
    const far = new Date(Date.now() + 12 * 3_600_000);
    const daily = `0 ${far.getUTCMinutes()} ${far.getUTCHours()} * * *`;
    const keys = systemKeys(NAMESPACE);
    const idle = this.shape.jobs - this.shape.due;
    const last = await this.ctx.redis.plain.incrby(keys.jobSeq, idle);
    const now = app.clock.now();
    for (let from = 0; from < idle; from += 500) {
      const fields: string[] = [];
      for (let i = from; i < Math.min(idle, from + 500); i++) {
        const id = String(last - idle + 1 + i);
        const job: JobRecord = {
          id, name: `bench idle ${i}`, group: "bench", target: "BenchNoop", params: "", schedule: daily, timeZone: "UTC",
          executePolicy: 2, sync: false, status: 1, remark: "", misfirePolicy: "skip", catchUpWindowMs: 0,
          createTimeMs: now, updateTimeMs: now, createActor: "bench", updateActor: "bench", activeSinceMs: now, deleted: false,
        };
        fields.push(id, JSON.stringify(job));
      }
      await this.ctx.redis.plain.hset(keys.jobs, ...fields);
    }
    await app.scheduler.resync();
    const mounted = () => app.scheduler.mounted().length;
    await waitFor(() => mounted() >= this.shape.jobs, 120_000, `${this.shape.jobs} jobs to be mounted`, 50);
    this.setupMs = Date.now() - t0;
    log(`scheduler: ${mounted()} jobs mounted in ${(this.setupMs / 1000).toFixed(1)} s (API create+resume of ${this.shape.due} due jobs: ${this.apiSec.toFixed(1)} s)`);
  }

  /** Waits for the next tick boundary, then for its runs; returns that tick's lateness. */
  async nextTick(): Promise<TickResult> {
    const clock = this.sy!.app.clock;
    const period = this.shape.periodSec * 1000;
    const tickMs = Math.floor(clock.now() / period) * period + period;
    await sleep(tickMs - clock.now() + period * 0.8);
    const calls = this.calls.filter((c) => c.at >= tickMs && c.at < tickMs + period && this.dueIds.has(c.job));
    this.calls = this.calls.filter((c) => c.at >= tickMs + period);
    const lateness = calls.map((c) => c.at - tickMs);
    return {
      tickMs,
      p50: percentile(lateness, 50),
      p99: percentile(lateness, 99),
      max: Math.max(...lateness),
      runs: calls.length,
      distinctJobs: new Set(calls.map((c) => c.job)).size,
    };
  }

  async teardown(): Promise<void> {
    await this.sy?.stop();
  }
}
