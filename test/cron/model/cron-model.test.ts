/**
 * A model-based test of the scheduler (issue 12): seeded random histories of
 * publish, pause, resume, unpublish, update (two in one millisecond too, or of
 * a field other than the schedule),
 * RunOnce, and instances starting and stopping, on 2–3 real instances with one
 * ManualClock over one real Redis, checked against a model after every clock
 * step: each due tick of a RUNNING job runs exactly once (a queue target's
 * items carry the tick; a local HTTP target counts its hits), or leaves a log
 * entry with its reason (overlap, lock held), and nothing else runs; while
 * every instance is down, ticks fire nowhere, and the first instance up runs
 * the latest if it is within the misfire grace and logs the rest as misfires.
 *
 * The model computes due ticks on its own: schedules are `* /k * * * * *`
 * (every k seconds of each minute), so a tick is a whole second whose
 * second-of-minute is a multiple of k. Changes are made at .500 s and ticks
 * fall on whole seconds, so no tick is ambiguous about which state it met.
 *
 * `npm test` runs SWITCHYARD_CRON_MODEL_RUNS seeds (default 4) of
 * SWITCHYARD_CRON_MODEL_STEPS steps (default 50); SWITCHYARD_CRON_MODEL_SEED
 * replays one seed. A failing seed prints its history.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../../src/clock.js";
import { ExecutePolicy, JobRunStatus, JobStatus, JobTrigger, type JobLog } from "../../../src/gen/switchyard/v1/cron_pb.js";
import { QueueList, QueueMode } from "../../../src/gen/switchyard/v1/queue_pb.js";
import { below, random } from "../../helpers/random.js";
import { startRedis, type TestRedis } from "../../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../../helpers/switchyard.js";

const RUNS = Number(process.env.SWITCHYARD_CRON_MODEL_RUNS ?? 4);
const STEPS = Number(process.env.SWITCHYARD_CRON_MODEL_STEPS ?? 50);
const ONE_SEED = process.env.SWITCHYARD_CRON_MODEL_SEED;
const SEEDS = ONE_SEED ? [Number(ONE_SEED)] : Array.from({ length: RUNS }, (_, i) => 1201 + i);

const START = Date.UTC(2026, 5, 1, 12, 0, 0, 500);
const PERIODS = [1, 2, 3, 5, 7];

let redis: TestRedis;
let server: Server;
let base: string;
const hits = new Map<string, number>(); // HTTP path → hits

beforeAll(async () => {
  redis = await startRedis();
  server = createServer((req, res) => {
    hits.set(req.url ?? "", (hits.get(req.url ?? "") ?? 0) + 1);
    req.resume();
    res.writeHead(200).end("counted");
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise<void>((ok) => server?.close(() => ok()));
  await redis?.stop();
});

/** What the model knows of one job. */
interface ModelJob {
  id: string;
  kind: "queue" | "http";
  /** The queue a queue target enqueues onto, or the path an HTTP target calls. */
  where: string;
  policy: ExecutePolicy;
  sync: boolean;
  /** Each change from its time on: whether it is RUNNING, and its period (`*\/period` seconds). */
  states: { at: number; running: boolean; period: number }[];
  runOnces: number;
}

/** The ticks the model says are due for `job` up to `until`: whole seconds while RUNNING whose second matches the period then. */
function dueTicks(job: ModelJob, until: number): number[] {
  const out: number[] = [];
  job.states.forEach((state, i) => {
    if (!state.running) return;
    const end = Math.min(job.states[i + 1]?.at ?? until, until);
    for (let t = Math.ceil(state.at / 1000) * 1000; t <= end; t += 1000) {
      if (t > state.at && (t / 1000) % 60 % state.period === 0) out.push(t);
    }
  });
  return out;
}

/** A misfire: a tick later than this when claimed runs nothing (SWITCHYARD_MISFIRE_GRACE's default). */
const GRACE_MS = 5000;

/** What a tick must leave in the job log: a run (or, by policy, an overlap or lock-held skip), or a misfire entry. */
type Expected = "run" | "misfire";

/**
 * The entries the model expects for `job` up to `until`, by tick. While every
 * instance was down (`downs`), ticks fire nowhere: when one starts it claims
 * the latest missed tick, which runs if it is within the misfire grace (the
 * ticks before it then leave one misfire entry, at the first), or else leaves
 * one misfire entry itself.
 */
function expectedEntries(job: ModelJob, until: number, downs: { from: number; to: number }[]): Map<number, Expected> {
  const out = new Map<number, Expected>();
  const due = dueTicks(job, until);
  for (const t of due) if (!downs.some((d) => t > d.from && t <= d.to)) out.set(t, "run");
  for (const d of downs) {
    const missed = due.filter((t) => t > d.from && t <= d.to);
    if (missed.length === 0) continue;
    const [first, last] = [missed[0], missed[missed.length - 1]];
    if (d.to - last > GRACE_MS) out.set(last, "misfire");
    else {
      out.set(last, "run");
      if (missed.length > 1) out.set(first, "misfire");
    }
  }
  return out;
}

const tickOf = (l: JobLog) => Number(l.tickTime!.seconds) * 1000 + l.tickTime!.nanos / 1e6;
const iso = (ms: number) => new Date(ms).toISOString().slice(11, 23);

async function runSeed(seed: number): Promise<void> {
  const next = random(seed);
  const clock = new ManualClock(START);
  const history: string[] = [];
  const say = (line: string) => history.push(`${iso(clock.now())} ${line}`);
  const env = { SWITCHYARD_HTTP_ALLOW: "127.0.0.1" };
  const live: TestSwitchyard[] = [];
  let started = 0;
  const startOne = async () => {
    const sy = await startSwitchyard(redis, { clock, env });
    live.push(sy);
    say(`start instance ${++started} (${live.length} up)`);
  };
  const jobs: ModelJob[] = [];
  /** When every instance was down: from the last stop to the next start. */
  const downs: { from: number; to: number }[] = [];
  const fail = (problems: string[]) => {
    throw new Error(
      `cron model, seed ${seed}: ${problems.slice(0, 10).join("; ")}\n` +
        `replay: SWITCHYARD_CRON_MODEL_SEED=${seed} npx vitest run test/cron/model\nhistory:\n  ${history.slice(-60).join("\n  ")}`,
    );
  };

  try {
    await startOne();
    await startOne();
    const api = () => live[below(next, live.length)].client;
    for (let i = 0; i < 4; i++) {
      const kind = i % 2 === 0 ? "queue" : "http";
      const where = kind === "queue" ? `model.q${i}` : `/hit/${seed}/${i}`;
      if (kind === "queue") await api().createQueue({ name: where, mode: QueueMode.SIMPLE });
      const period = PERIODS[below(next, PERIODS.length)];
      const policy = [ExecutePolicy.CONCURRENT, ExecutePolicy.SINGLETON, ExecutePolicy.ABANDON][below(next, 3)];
      const sync = next() < 0.3;
      const job = await api().createJob({
        name: `model ${i}`, target: kind === "queue" ? `queue:${where}` : `${base}${where}`, schedule: `*/${period} * * * * *`, executePolicy: policy, sync,
      });
      jobs.push({ id: job.id, kind, where, policy, sync, states: [{ at: clock.now(), running: false, period }], runOnces: 0 });
      say(`create job ${job.id}: ${kind}, */${period}, policy ${ExecutePolicy[policy]}${sync ? ", sync" : ""}`);
    }

    /** Every live instance applies the change now (the clock does not move until they have). */
    const applied = (id: string) => Promise.all(live.map((sy) => sy.app.scheduler.refresh(id)));
    const last = (job: ModelJob) => job.states[job.states.length - 1];
    const setStatus = async (job: ModelJob, status: JobStatus, running: boolean) => {
      await api().setJobStatus(job.id, status);
      await applied(job.id);
      job.states.push({ ...last(job), at: clock.now(), running });
      say(`job ${job.id} → ${JobStatus[status]}`);
    };
    const reschedule = async (job: ModelJob, periods: number[]) => {
      // Each applied before the next, as each one's announcement would be: the second has the first's update time.
      for (const period of periods) {
        await api().updateJob({ id: job.id, schedule: `*/${period} * * * * *` }, ["schedule"]);
        await applied(job.id);
      }
      job.states.push({ ...last(job), at: clock.now(), period: periods[periods.length - 1] });
      say(`job ${job.id} schedule → ${periods.map((p) => `*/${p}`).join(" then, in the same ms, ")}`);
    };

    /** Polls until each job's log holds what the model expects up to now, then checks it entry by entry. */
    const check = async () => {
      const now = clock.now();
      const logsOf = async (job: ModelJob) => (await live[0].client.listJobLogs(job.id, 1000)).logs;
      const expected = (job: ModelJob) => expectedEntries(job, now, downs).size + job.runOnces;
      let seen: JobLog[][] = [];
      try {
        await expect
          .poll(async () => {
            seen = await Promise.all(jobs.map(logsOf));
            return seen.map((l) => l.length);
          }, { timeout: 30_000 })
          .toEqual(jobs.map(expected));
      } catch {
        // Compared entry by entry below, which says what is missing or extra.
      }
      const problems: string[] = [];
      jobs.forEach((job, j) => {
        const logs = seen[j] ?? [];
        const byTick = new Map<number, JobLog[]>();
        for (const l of logs.filter((l) => l.trigger !== JobTrigger.RUN_ONCE)) byTick.set(tickOf(l), [...(byTick.get(tickOf(l)) ?? []), l]);
        const due = expectedEntries(job, now, downs);
        for (const [t, kind] of due) {
          const entries = byTick.get(t) ?? [];
          if (entries.length !== 1) problems.push(`job ${job.id} tick ${iso(t)}: ${entries.length} entries (${entries.map((e) => e.message || e.error).join(" | ")})`);
          for (const e of entries) {
            const skip = e.status === JobRunStatus.SKIPPED;
            const allowed =
              kind === "misfire"
                ? skip && e.message.startsWith("skipped: misfire")
                : skip
                  ? (job.policy === ExecutePolicy.SINGLETON && e.message.startsWith("skipped: overlap")) ||
                    (job.policy === ExecutePolicy.ABANDON && e.message.startsWith("abandoned: lock held"))
                  : e.status === JobRunStatus.SUCCEEDED && e.trigger === JobTrigger.SCHEDULE;
            if (!allowed) problems.push(`job ${job.id} tick ${iso(t)}, ${kind} expected: ${JobRunStatus[e.status]} ${JobTrigger[e.trigger]} "${e.message || e.error}"`);
          }
        }
        for (const [t, entries] of byTick) {
          if (!due.has(t)) problems.push(`job ${job.id} tick ${iso(t)} is not due, yet has ${entries.length} entries (${entries[0].message || entries[0].error})`);
        }
        const onces = logs.filter((l) => l.trigger === JobTrigger.RUN_ONCE);
        if (onces.length !== job.runOnces) problems.push(`job ${job.id}: ${onces.length} RunOnce entries, not ${job.runOnces}`);
        if (onces.some((l) => l.status !== JobRunStatus.SUCCEEDED)) problems.push(`job ${job.id}: a RunOnce did not succeed`);
      });
      if (problems.length) fail(problems);
    };

    /** What the targets saw: one HTTP hit or one item per run that succeeded, items naming their tick. */
    const checkTargets = async () => {
      const problems: string[] = [];
      for (const job of jobs) {
        const logs = (await live[0].client.listJobLogs(job.id, 1000)).logs;
        const ran = logs.filter((l) => l.status === JobRunStatus.SUCCEEDED);
        if (job.kind === "http") {
          if ((hits.get(job.where) ?? 0) !== ran.length) problems.push(`job ${job.id}: ${hits.get(job.where) ?? 0} HTTP hits for ${ran.length} runs`);
          continue;
        }
        const total = Number((await live[0].client.peekQueue(job.where, QueueList.READY, 1)).total);
        const session = live[0].client.lease(job.where, Math.max(1, total));
        const items = total ? await session.take(total) : [];
        await session.close();
        const ticks = items.map((d) => d.headers["switchyard-tick-time"]).filter(Boolean).map((t) => Date.parse(t)).sort((a, b) => a - b);
        const runTicks = ran.filter((l) => l.trigger === JobTrigger.SCHEDULE).map(tickOf).sort((a, b) => a - b);
        if (JSON.stringify(ticks) !== JSON.stringify(runTicks)) problems.push(`job ${job.id}: items for ticks ${ticks.map(iso)}, runs at ${runTicks.map(iso)}`);
        if (items.length - ticks.length !== job.runOnces) problems.push(`job ${job.id}: ${items.length - ticks.length} RunOnce items, not ${job.runOnces}`);
      }
      if (problems.length) fail(problems);
    };

    for (let step = 0; step < STEPS; step++) {
      const job = jobs[below(next, jobs.length)];
      const roll = next();
      if (roll < 0.4) {
        const ms = (1 + below(next, 3)) * 1000;
        for (let done = 0; done < ms; done += 250) await clock.advance(250);
        say(`+${ms} ms`);
        await check();
      } else if (roll < 0.55) {
        await setStatus(job, JobStatus.RUNNING, true);
      } else if (roll < 0.65) {
        await setStatus(job, JobStatus.PAUSED, false);
      } else if (roll < 0.7) {
        await setStatus(job, JobStatus.UNPUBLISHED, false);
      } else if (roll < 0.78) {
        await reschedule(job, [PERIODS[below(next, PERIODS.length)]]);
      } else if (roll < 0.83) {
        await reschedule(job, [PERIODS[below(next, PERIODS.length)], PERIODS[below(next, PERIODS.length)]]);
      } else if (roll < 0.86) {
        // A change that is no reschedule: every instance remounts the job, which owes no tick for it.
        await api().updateJob({ id: job.id, remark: `step ${step}` }, ["remark"]);
        await applied(job.id);
        say(`job ${job.id} remark changed`);
      } else if (roll < 0.9) {
        await api().runOnce(job.id);
        job.runOnces++;
        say(`RunOnce job ${job.id}`);
      } else if (roll < 0.94 && live.length > 1) {
        await check(); // nothing in flight on the instance that stops
        const [gone] = live.splice(below(next, live.length), 1);
        await gone.stop();
        say(`stop an instance (${live.length} up)`);
      } else if (roll < 0.97) {
        // Every instance down for 1-8 s: the ticks meanwhile fire nowhere, and the first instance up catches up.
        await check();
        await Promise.all(live.splice(0).map((sy) => sy.stop()));
        const ms = (1 + below(next, 8)) * 1000;
        const from = clock.now();
        await clock.advance(ms);
        say(`every instance down for ${ms} ms`);
        downs.push({ from, to: clock.now() });
        await startOne();
        if (next() < 0.5) await startOne();
        await check();
      } else if (live.length < 3) {
        await startOne();
      }
    }
    await check();
    await checkTargets();
  } finally {
    await Promise.all(live.map((sy) => sy.stop()));
    await redis.flushAll();
  }
}

describe("the scheduler against a model", () => {
  for (const seed of SEEDS) {
    it(`seed ${seed}: ${STEPS} steps`, () => runSeed(seed), 60_000 + STEPS * 2_000);
  }
});
