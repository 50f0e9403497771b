/**
 * The scheduler (SPEC C2–C14, I1). Every instance runs one and mounts every
 * RUNNING job: a cron job joins the jobs due at its next fire time, which share
 * a timer; an interval job has a timer of its own.
 *
 * A cron tick is named by its scheduled time, which all instances compute alike
 * from the schedule; claim-ticks.lua lets exactly one instance claim it, so a
 * tick runs once however many instances fire it, and a job deleted or paused
 * behind the scheduler's back is seen and unmounted at fire time. Jobs due at
 * the same time are claimed together, a batch per script call, and their runs
 * start without waiting for each other. An interval job (`@every`) claims its
 * run with claim-interval.lua: now > last + interval, checked and recorded in
 * one step.
 *
 * A claimed tick then follows the job's execute policy: 1 runs at once; 2 and 3
 * take the execution lock and skip (2, "overlap") or abandon (3, "lock held")
 * the tick when another run holds it. An on-time cron tick takes the lock in
 * its claim; a late one (it may be a misfire, which runs nothing) and an
 * interval run take it with job-lock.lua once they know they run. A run renews
 * its lock every third of the TTL, and releases it when it ends. Every tick that
 * does not run writes a log entry saying why.
 *
 * Time comes from the injected clock, which follows Redis's clock in
 * production, so hosts whose clocks disagree still fire a tick at one time.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { systemClock, type Clock, type Timer } from "../clock.js";
import type { Logger } from "../log.js";
import { noMetrics, type Metrics, type SkipReason } from "../metrics/hooks.js";
import type { RedisClient, RedisConnection } from "../redis/connection.js";
import type { SystemKeys } from "../redis/keys.js";
import { acquireJobLock, claimInterval, claimTicks, touchJobLock, type Claim, type LockAttempt, type TickClaim } from "../redis/scripts.js";
import { runTarget, RunFailure, type ExecutorOptions } from "./executor.js";
import { RUNNING, versionOf, type JobRecord } from "./job.js";
import type { JobLogEntry, JobLogStore, RunTrigger } from "./job-log.js";
import { nextFire, parseSchedule, type Schedule } from "./schedule.js";
import type { JobStore } from "./store.js";

/** Scheduler tuning; defaults in config.ts. */
export interface SchedulerOptions {
  instanceId?: string;
  /** The execution lock's backstop TTL (the seed's 300 s). */
  lockTtlMs: number;
  /** How often each instance reloads every job, in case a change announcement was missed. */
  resyncIntervalMs: number;
  /** How often each instance records that it is alive and what it has mounted. */
  heartbeatIntervalMs: number;
  /** A tick fired later than this is a misfire (its instance was stalled or down). */
  misfireGraceMs: number;
}

/** One instance's scheduler, as GetSchedulerStatus reports it. */
export interface InstanceStatus {
  instanceId: string;
  startTimeMs: number;
  mounted: string[];
  lastSeenMs: number;
}

interface Mount {
  job: JobRecord;
  /** The job as JSON, as the store writes it: a claim that reads the same text needs no parsing. */
  json: string;
  schedule: Schedule;
  /** An interval job's timer. */
  timer?: Timer;
  /** The tick a cron job is armed for: it is in that tick's DueTick. */
  tick?: number;
  /** A cron job's mounting: its catch-up, then arming for its next tick. */
  armed?: Promise<void>;
  /** When it was mounted, in records applied by this instance (see Scheduler.applied). */
  seq: number;
}

/** The cron jobs due at one time, fired by one timer. */
interface DueTick {
  mounts: Set<Mount>;
  timer: Timer;
}

/** Misfires scanned at most per job when an instance mounts it. */
const MAX_MISSED_SCAN = 100_000;

/** Jobs claimed per script call: bounds how long one call holds Redis. */
const CLAIM_BATCH = 1000;

/** Ticks a sync run may outlast that are each claimed and logged; the rest are logged as one entry. */
const MAX_OUTLASTED = 100;

export class Scheduler {
  readonly instanceId: string;
  readonly startTimeMs: number;
  private readonly mounts = new Map<string, Mount>();
  /** Armed cron jobs by tick time. */
  private readonly dueTicks = new Map<number, DueTick>();
  private readonly runs = new Set<Promise<void>>();
  private readonly stopRuns = new AbortController();
  private readonly timers: Timer[] = [];
  private unsubscribe?: () => void;
  /** The newest version of each job this instance acted on: an older read of it is stale and ignored. */
  private readonly seen = new Map<string, number>();
  /** Job records applied so far: orders mounts against a resync's snapshot. */
  private applied = 0;
  private stopped = false;
  private beatPending = false;

  constructor(
    private readonly redis: RedisConnection,
    private readonly keys: SystemKeys,
    private readonly store: JobStore,
    private readonly logs: JobLogStore,
    private readonly clock: Clock,
    private readonly executor: ExecutorOptions,
    private readonly options: SchedulerOptions,
    private readonly log: Logger,
    private readonly metrics: Metrics = noMetrics,
  ) {
    this.instanceId = options.instanceId ?? `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    this.startTimeMs = clock.now();
  }

  private get client(): RedisClient {
    return this.redis.client;
  }

  /** Follows job changes, seeds the built-in jobs on first start, and mounts every RUNNING job. */
  async start(): Promise<void> {
    this.unsubscribe = await this.redis.subscribe(this.keys.cronEvents, (id) => void this.refresh(id));
    await this.seedBuiltins();
    await this.resync();
    await this.beat();
    this.every(this.options.resyncIntervalMs, () => this.resync());
    this.every(this.options.heartbeatIntervalMs, () => this.beat());
  }

  /** Unmounts everything, stops timers, and waits for detached runs (which are told to stop). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) t.cancel();
    for (const id of [...this.mounts.keys()]) this.unmount(id);
    this.unsubscribe?.();
    this.stopRuns.abort();
    await Promise.allSettled([...this.runs]);
    await this.client.hdel(this.keys.instances, this.instanceId).catch(() => undefined);
  }

  private every(ms: number, fn: () => Promise<void>): void {
    const arm = () => {
      if (this.stopped) return;
      const timer = this.clock.setTimer(ms, async () => {
        await fn().catch((err: unknown) => this.log.warn("scheduler housekeeping failed", { err }));
        arm();
      });
      this.timers.push(timer);
      if (this.timers.length > 16) this.timers.splice(0, this.timers.length - 16);
    };
    arm();
  }

  /** The job ids mounted on this instance. */
  mounted(): string[] {
    return [...this.mounts.keys()].sort((a, b) => Number(a) - Number(b));
  }

  private async beat(): Promise<void> {
    const status: InstanceStatus = {
      instanceId: this.instanceId,
      startTimeMs: this.startTimeMs,
      mounted: this.mounted(),
      lastSeenMs: this.clock.now(),
    };
    await this.client.hset(this.keys.instances, this.instanceId, JSON.stringify(status));
  }

  /** Every instance seen within three heartbeats, by id; older records are removed. */
  async instances(): Promise<InstanceStatus[]> {
    const all = Object.values(await this.client.hgetall(this.keys.instances)).map((j) => JSON.parse(j) as InstanceStatus);
    const horizon = this.clock.now() - 3 * this.options.heartbeatIntervalMs;
    const stale = all.filter((s) => s.lastSeenMs < horizon);
    if (stale.length) await this.client.hdel(this.keys.instances, ...stale.map((s) => s.instanceId));
    return all.filter((s) => s.lastSeenMs >= horizon).sort((a, b) => a.instanceId.localeCompare(b.instanceId));
  }

  private async seedBuiltins(): Promise<void> {
    // "pending" expires, so an instance that dies between the flag and the job leaves the seeding to the next.
    if ((await this.client.set(this.keys.seeded, "pending", "PX", 60_000, "NX")) !== "OK") return;
    const job = await this.store.create(
      {
        name: "LogClean",
        group: "system",
        target: "LogClean",
        params: "",
        schedule: "0 30 2 * * *",
        timeZone: "UTC",
        executePolicy: 2,
        sync: false,
        remark: "built-in: removes log entries older than retentionDays (default 90)",
        misfirePolicy: "skip",
        catchUpWindowMs: 0,
      },
      "system",
    );
    await this.store.setStatus(job.id, RUNNING, "system");
    await this.client.set(this.keys.seeded, job.id);
  }

  /**
   * Mounts every RUNNING job and unmounts the rest, from one read of them all:
   * a job that changed since that read (announced and applied while this one
   * mounts job after job) keeps what its newer record said.
   */
  async resync(): Promise<void> {
    const before = this.applied;
    const jobs = await this.store.all(true);
    for (const job of jobs) await this.apply(job.id, job);
    // A mounted job the read did not find at all (its record vanished): unless it was mounted after the read.
    const found = new Set(jobs.map((j) => j.id));
    for (const [id, mount] of [...this.mounts]) if (!found.has(id) && mount.seq <= before) this.unmount(id);
  }

  /** Re-reads one job after a change announcement and mounts or unmounts it. */
  async refresh(id: string): Promise<void> {
    if (this.stopped) return;
    try {
      await this.apply(id, await this.store.find(id, true));
    } catch (err) {
      this.log.warn("could not refresh a job; the next resync will", { job: id, err });
    }
  }

  /**
   * Mounts a job whose record says RUNNING, and unmounts one that is not (or
   * no longer exists), unless this instance already acted on a newer version
   * of it: a read that raced a change (a resync's snapshot, a claim's reply)
   * never undoes the change.
   */
  private async apply(id: string, job: JobRecord | undefined): Promise<void> {
    if (job) {
      if (versionOf(job) < (this.seen.get(id) ?? 0)) return;
      this.seen.set(id, versionOf(job));
    }
    this.applied++;
    if (job && !job.deleted && job.status === RUNNING) await this.mount(job);
    else this.unmount(id);
  }

  private unmount(id: string): void {
    const mount = this.mounts.get(id);
    if (!mount) return;
    mount.timer?.cancel();
    if (mount.tick !== undefined) {
      const due = this.dueTicks.get(mount.tick);
      if (due?.mounts.delete(mount) && due.mounts.size === 0) {
        due.timer.cancel();
        this.dueTicks.delete(mount.tick);
      }
    }
    this.mounts.delete(id);
    this.mountsChanged();
  }

  /** Publishes this instance's mounted jobs soon after they change (once per turn of the event loop). */
  private mountsChanged(): void {
    if (this.beatPending || this.stopped) return;
    this.beatPending = true;
    // At most every 100 ms of wall time: mounting 10,000 jobs must not rewrite the list 10,000 times.
    systemClock.setTimer(100, () => {
      this.beatPending = false;
      if (!this.stopped) this.beat().catch((err: unknown) => this.log.warn("could not record scheduler status", { err }));
    });
  }

  /** Mounts a job, or remounts it when it changed since it was mounted. */
  private async mount(job: JobRecord): Promise<void> {
    if (this.stopped) return;
    const current = this.mounts.get(job.id);
    // The same record again: done once its first mounting is (refresh() then resolves with the job armed).
    if (current && versionOf(current.job) === versionOf(job) && current.job.updateTimeMs === job.updateTimeMs && current.job.status === job.status) {
      return current.armed;
    }
    this.unmount(job.id);
    let schedule: Schedule;
    try {
      schedule = parseSchedule(job.schedule, job.timeZone);
    } catch (err) {
      this.log.error("cannot mount a job with an invalid schedule", { job: job.id, err });
      return;
    }
    const mount: Mount = { job, json: JSON.stringify(job), schedule, seq: this.applied };
    this.mounts.set(job.id, mount);
    this.mountsChanged();
    if (schedule.kind === "every") {
      this.armInterval(mount, 0);
    } else {
      // Arm from the moment of mounting: a tick that falls due while catchUp waits on Redis still fires.
      const mountedAt = this.clock.now();
      mount.armed = this.catchUp(mount).then(() => this.armCron(mount, nextFire(schedule, mountedAt)));
      await mount.armed;
    }
  }

  /** Adds a cron job to the jobs due at `tick`, the first of them arming the timer. */
  private armCron(mount: Mount, tick: number | undefined): void {
    if (this.mounts.get(mount.job.id) !== mount || tick === undefined) return;
    let due = this.dueTicks.get(tick);
    if (!due) {
      due = { mounts: new Set(), timer: this.clock.setTimer(tick - this.clock.now(), () => this.fireDue(tick)) };
      this.dueTicks.set(tick, due);
    }
    due.mounts.add(mount);
    mount.tick = tick;
  }

  private armInterval(mount: Mount, delayMs: number): void {
    if (this.mounts.get(mount.job.id) !== mount) return;
    mount.timer = this.clock.setTimer(Math.max(0, delayMs), () => this.fireInterval(mount));
  }

  /**
   * When a job is mounted, looks for ticks nobody fired (every instance was
   * down): the latest is claimed once and, by the misfire policy, run as a
   * catch-up or logged as skipped.
   */
  private async catchUp(mount: Mount): Promise<void> {
    const { job, schedule } = mount;
    const last = Number((await this.client.hget(this.keys.ticks, job.id)) ?? 0);
    const since = Math.max(last, job.activeSinceMs);
    const now = this.clock.now();
    let tick = since > 0 ? nextFire(schedule, since) : undefined;
    if (tick === undefined || tick > now) return;
    const first = tick;
    let missed = 1;
    for (let next = nextFire(schedule, tick); next !== undefined && next <= now && missed < MAX_MISSED_SCAN; next = nextFire(schedule, next)) {
      tick = next;
      missed++;
    }
    const [claim] = await claimTicks(this.client, this.keys, tick, [job.id]);
    await this.claimed(mount, tick, claim, { missed, first });
  }

  /** Fires every cron job due at `tick`: claims them in batches, runs them, and arms each for its next tick. */
  private async fireDue(tick: number): Promise<void> {
    const due = this.dueTicks.get(tick);
    if (!due) return;
    // A timer that fired early (the host's timers are not Redis's clock) claims nothing yet.
    if (tick - this.clock.now() > 1000) return void (due.timer = this.clock.setTimer(tick - this.clock.now(), () => this.fireDue(tick)));
    this.dueTicks.delete(tick);
    const mounts = [...due.mounts];
    for (const mount of mounts) mount.tick = undefined;
    // Jobs with one schedule share their next fire time: compute it once per schedule, not per job.
    const nextAfterTick = new Map<string, number | undefined>();
    const rearm = (mount: Mount) => {
      if (mount.schedule.kind !== "cron") return;
      const key = `${mount.schedule.expression} ${mount.schedule.timeZone}`;
      if (!nextAfterTick.has(key)) nextAfterTick.set(key, nextFire(mount.schedule, tick));
      const next = nextAfterTick.get(key);
      // The first fire after max(tick, now): the shared one, unless this job's run outlasted it.
      const now = this.clock.now();
      this.armCron(mount, next !== undefined && next <= now ? nextFire(mount.schedule, now) : next);
    };
    const batches: Mount[][] = [];
    for (let i = 0; i < mounts.length; i += CLAIM_BATCH) batches.push(mounts.slice(i, i + CLAIM_BATCH));
    await Promise.all(batches.map((batch) => this.fireBatch(tick, batch, rearm)));
  }

  /** Claims one batch of jobs due at `tick`, then acts on each claim and re-arms the job, none waiting for another. */
  private async fireBatch(tick: number, mounts: Mount[], rearm: (mount: Mount) => void): Promise<void> {
    const now = this.clock.now();
    // A late tick may turn out a misfire, which runs nothing: only an on-time claim takes locks.
    const lock = now - tick <= this.options.misfireGraceMs ? { owner: this.instanceId, now, ttlMs: this.options.lockTtlMs } : undefined;
    let claims: TickClaim[] | undefined;
    try {
      claims = await claimTicks(this.client, this.keys, tick, mounts.map((m) => m.job.id), lock);
    } catch (err) {
      this.log.warn("tick claim failed", { jobs: mounts.map((m) => m.job.id), tick, err });
      // Every tick that did not run leaves an entry (C14): this one may have run elsewhere, which the entry says.
      const why = `skipped: the tick could not be claimed (${err instanceof Error ? err.message : String(err)}); another instance may have run it`;
      await Promise.all(mounts.map((m) => this.skip(m.job, tick, "claim_failed", why)));
    }
    await Promise.all(
      mounts.map(async (mount, i) => {
        try {
          if (claims) await this.claimed(mount, tick, claims[i]);
          await this.skipOutlasted(mount, tick);
        } catch (err) {
          this.log.warn("tick claim failed", { job: mount.job.id, tick, err });
        }
        rearm(mount);
      }),
    );
  }

  /**
   * The ticks of a cron job that fell due while this instance was still busy
   * with `tick` (a sync run, or a slow claim) were armed nowhere here: each is
   * claimed now and, unless another instance took it, logged as skipped, so it
   * leaves an entry and a metric like any tick that does not run (SPEC C14).
   */
  private async skipOutlasted(mount: Mount, tick: number): Promise<void> {
    if (this.mounts.get(mount.job.id) !== mount || mount.schedule.kind !== "cron") return;
    const now = this.clock.now();
    const why = mount.job.sync
      ? `skipped: overlap, the sync run of ${new Date(tick).toISOString()} was still running`
      : `skipped: misfire, this instance was still claiming ${new Date(tick).toISOString()}`;
    const reason: SkipReason = mount.job.sync ? "overlap" : "misfire";
    let n = 0;
    for (let t = nextFire(mount.schedule, tick); t !== undefined && t <= now; t = nextFire(mount.schedule, t)) {
      // Past the first hundred, one claim of the latest tick stands for the rest, and one entry.
      let last = t;
      let more = 1;
      if (++n > MAX_OUTLASTED) {
        for (let u = nextFire(mount.schedule, t); u !== undefined && u <= now && more < MAX_MISSED_SCAN; u = nextFire(mount.schedule, u)) [last, more] = [u, more + 1];
      }
      const [claim] = await claimTicks(this.client, this.keys, last, [mount.job.id]);
      if (claim.result === "taken" && more > 1) return; // another instance fired the latest: the rest is its
      if (claim.result === "taken") continue; // another instance fired it
      if (claim.result !== "run") return this.claimed(mount, t, claim); // gone or not running: unmounts, logs why
      const job = claim.job === mount.json ? mount.job : (JSON.parse(claim.job!) as JobRecord);
      if (more === 1) await this.skip(job, t, reason, why);
      else return this.skip(job, t, reason, `${why} (${more} ticks, to ${new Date(last).toISOString()})`);
    }
  }

  private async fireInterval(mount: Mount): Promise<void> {
    if (this.mounts.get(mount.job.id) !== mount || mount.schedule.kind !== "every") return;
    const interval = mount.schedule.intervalMs;
    let next = interval;
    const now = this.clock.now();
    let claim: Claim | undefined;
    try {
      claim = await claimInterval(this.client, this.keys.jobs, this.keys.ticks, mount.job.id, now, interval);
    } catch (err) {
      this.log.warn("interval claim failed", { job: mount.job.id, err });
      const why = `skipped: the run could not be claimed (${err instanceof Error ? err.message : String(err)}); another instance may have run it`;
      await this.skip(mount.job, now, "claim_failed", why);
    }
    if (claim?.result === "wait") next = claim.atMs! + interval + 1 - this.clock.now();
    else if (claim) await this.claimed(mount, claim.atMs ?? now, claim).catch((err: unknown) => this.log.warn("interval run failed", { job: mount.job.id, err }));
    this.armInterval(mount, next);
  }

  /** Acts on a claim: unmount, skip with a reason, or run (awaited when the job is sync). */
  private async claimed(mount: Mount, tick: number, claim: TickClaim, missed?: { missed: number; first: number }): Promise<void> {
    const id = mount.job.id;
    // A claim answers for the mount that made it: a newer mount of the job (a change applied meanwhile) stays.
    if (claim.result === "gone") return void (this.mounts.get(id) === mount && this.unmount(id));
    if (claim.result === "taken" || claim.result === "wait") return;
    const job = claim.job === mount.json ? mount.job : (JSON.parse(claim.job!) as JobRecord);
    if (claim.result === "inactive") {
      // The record the claim read: applied unless this instance already acted on a newer one.
      await this.apply(id, job);
      const state = job.status === 2 ? "paused" : "unpublished";
      return this.skip(job, tick, state, `skipped: the job is ${state}`);
    }
    // A misfire is judged by lateness alone: a tick claimed in catch-up a moment after it fell due (a mount
    // right after it) is on time and runs; the missed ticks before it, if any, did not run.
    const lateness = this.clock.now() - tick;
    let trigger: RunTrigger = "schedule";
    const count = (n: number, first: number) => `${n}${n >= MAX_MISSED_SCAN ? "+" : ""} tick(s) since ${new Date(first).toISOString()}`;
    if (missed && missed.missed > 1 && lateness <= this.options.misfireGraceMs) {
      await this.skip(job, missed.first, "misfire", `skipped: misfire, ${count(missed.missed - 1, missed.first)} fired no run in time`);
    }
    if (lateness > this.options.misfireGraceMs) {
      if (job.misfirePolicy !== "run_once" || lateness > job.catchUpWindowMs) {
        // The claim took the lock while the tick still looked on time: a misfire runs nothing, so it gives it back
        // (should that fail, the lock's TTL frees it).
        if (claim.lock?.acquired) await this.releaseLock(job, claim.lock.fence).catch(() => undefined);
        const what = missed ? count(missed.missed, missed.first) : "the tick";
        return this.skip(job, tick, "misfire", `skipped: misfire, ${what} fired no run in time (${Math.round(lateness / 1000)} s late)`);
      }
      trigger = "catch_up";
    }
    const run = this.track(this.runTick(job, tick, trigger, claim.lock));
    if (job.sync) await run;
  }

  private track(run: Promise<void>): Promise<void> {
    this.runs.add(run);
    void run.finally(() => this.runs.delete(run));
    return run;
  }

  private async skip(job: JobRecord, tick: number, reason: SkipReason, message: string): Promise<void> {
    this.metrics.tickSkipped(reason);
    await this.writeLog({ jobId: job.id, status: "skipped", message, error: "", durationMs: 0, trigger: "schedule", tickTimeMs: tick, fence: 0 });
  }

  /**
   * Runs a claimed tick under the job's execute policy, with the lock attempt
   * its claim made, or else taking the lock itself. Never throws.
   */
  private async runTick(job: JobRecord, tick: number, trigger: RunTrigger, claimedLock?: LockAttempt): Promise<void> {
    try {
      if (job.executePolicy === 1) return await this.execute(job, tick, trigger, 0);
      const ttl = this.options.lockTtlMs;
      const lock = this.keys.jobLock(job.id);
      const fenceKey = this.keys.jobFence(job.id);
      const got = claimedLock ?? (await acquireJobLock(this.client, lock, fenceKey, this.instanceId, this.clock.now(), ttl));
      this.metrics.jobLock(got.acquired ? "acquired" : "contended");
      if (!got.acquired) {
        return job.executePolicy === 2
          ? await this.skip(job, tick, "overlap", `skipped: overlap, the previous run (fence ${got.fence}) is still running`)
          : await this.skip(job, tick, "lock_held", `abandoned: lock held by run with fence ${got.fence}`);
      }
      let renewal: Timer | undefined;
      const renew = () => {
        renewal = this.clock.setTimer(ttl / 3, async () => {
          const held = await touchJobLock(this.client, "renew", lock, fenceKey, this.instanceId, got.fence, this.clock.now(), ttl).catch(
            () => true,
          );
          if (held) return renew();
          this.metrics.jobLock("lost");
          this.log.warn("lost the execution lock while running", { job: job.id, fence: got.fence });
        });
      };
      renew();
      try {
        await this.execute(job, tick, trigger, got.fence);
      } finally {
        renewal?.cancel();
        await this.releaseLock(job, got.fence);
      }
    } catch (err) {
      this.log.error("job run failed outside its handler", { job: job.id, err });
    }
  }

  private async releaseLock(job: JobRecord, fence: number): Promise<void> {
    const { lockTtlMs } = this.options;
    await touchJobLock(this.client, "release", this.keys.jobLock(job.id), this.keys.jobFence(job.id), this.instanceId, fence, this.clock.now(), lockTtlMs);
  }

  /** Runs the target and logs the outcome; a throwing handler never hurts the scheduler. */
  private async execute(job: JobRecord, tick: number, trigger: RunTrigger, fence: number, logId?: string): Promise<void> {
    const start = this.clock.now();
    let status: JobLogEntry["status"] = "succeeded";
    let message = "";
    let error = "";
    try {
      message = await runTarget(job, { jobId: job.id, fence, signal: this.stopRuns.signal, clock: this.clock, log: this.log }, tick, this.executor);
    } catch (err) {
      status = "failed";
      error = err instanceof RunFailure ? err.message : `handler threw: ${err instanceof Error ? err.message : String(err)}`;
    }
    this.metrics.jobRun(status === "succeeded" ? "succeeded" : "failed");
    await this.writeLog({ jobId: job.id, status, message, error, durationMs: this.clock.now() - start, trigger, tickTimeMs: tick, fence, startTimeMs: start }, logId);
  }

  private async writeLog(
    entry: Omit<JobLogEntry, "id" | "instanceId" | "startTimeMs"> & { startTimeMs?: number },
    id?: string,
  ): Promise<void> {
    try {
      await this.logs.append({
        ...entry,
        id: id ?? (await this.logs.newId(entry.jobId)),
        instanceId: this.instanceId,
        startTimeMs: entry.startTimeMs ?? this.clock.now(),
      });
    } catch (err) {
      this.log.error("could not write a job log entry", { job: entry.jobId, err });
    }
  }

  /** RunOnce: runs the job now, detached, whatever its status, unless `allowed` throws for it; resolves to the log entry's id. */
  async runOnce(id: string, allowed?: (job: JobRecord) => void): Promise<string> {
    const job = await this.store.get(id);
    allowed?.(job);
    const logId = await this.logs.newId(id);
    this.track(this.execute(job, 0, "run_once", 0, logId));
    return logId;
  }
}
