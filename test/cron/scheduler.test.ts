/**
 * The scheduler across several real instances sharing one Redis (SPEC C4–C6,
 * C8, C14, I1), on one injected clock that every instance's clock derives from.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock, SkewedClock, SyncedClock, type Clock } from "../../src/clock.js";
import { ExecutePolicy, JobRunStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let base: ManualClock;
let instances: TestSwitchyard[] = [];

/** A handler each test can hold open: runs wait until released. */
let gate: { release: () => void; wait: Promise<void> };
const openGate = () => {
  let release!: () => void;
  const wait = new Promise<void>((ok) => (release = ok));
  gate = { release, wait };
};
let slowCalls = 0;
const handlers: Record<string, JobHandler> = {
  Quick: async () => "done",
  Slow: async () => {
    slowCalls++;
    await gate.wait;
    return "finally done";
  },
};

/** An instance whose host clock is `skewMs` off, corrected against the shared clock standing in for Redis's. */
async function instance(skewMs = 0): Promise<TestSwitchyard> {
  const clock = new SyncedClock(new SkewedClock(base, skewMs));
  await clock.sync(async () => base.now());
  const sy = await startSwitchyard(redis, { clock: clock as Clock, handlers });
  instances.push(sy);
  return sy;
}

async function allLogs(sy: TestSwitchyard, jobId: string): Promise<JobLog[]> {
  const out: JobLog[] = [];
  let token = "";
  do {
    const page = await sy.client.listJobLogs(jobId, 1000, token);
    out.push(...page.logs);
    token = page.nextPageToken;
  } while (token);
  return out;
}

/**
 * Waits until every one of `on` has mounted each job and armed it for its next tick: a job
 * shows as mounted before its catch-up read returns, and the clock must not move before it is armed.
 */
async function armed(on: TestSwitchyard[], ...ids: string[]): Promise<void> {
  await expect.poll(() => on.every((sy) => ids.every((id) => sy.app.scheduler.mounted().includes(id)))).toBe(true);
  await Promise.all(on.flatMap((sy) => ids.map((id) => sy.app.scheduler.refresh(id))));
}

const tickOf = (l: JobLog) => Number(l.tickTime!.seconds) * 1000 + l.tickTime!.nanos / 1e6;

/** Advances the shared clock one step at a time, so every instance's timers fire in order. */
async function advance(ms: number, step = 250): Promise<void> {
  for (let done = 0; done < ms; done += step) await base.advance(Math.min(step, ms - done));
}

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  await Promise.all(instances.map((i) => i.stop()));
  instances = [];
  gate?.release();
  await redis.flushAll();
});
afterAll(async () => redis.stop());

describe("one run per tick across instances", () => {
  it("runs a job every second for 20 s exactly once per tick on three instances whose clocks are ±30 s off", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const [a, b, c] = [await instance(0), await instance(30_000), await instance(-30_000)];
    // No lock (policy 1): only the tick claim stands between three instances and a duplicate run.
    const job = await a.client.createJob({ name: "every second", target: "Quick", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await b.client.resumeJob(job.id);
    await armed([a, b, c], job.id);
    const start = base.now();
    await advance(20_000);
    await expect.poll(async () => (await allLogs(a, job.id)).length).toBe(20);
    const logs = await allLogs(a, job.id);
    const ticks = logs.map(tickOf).sort((x, y) => x - y);
    const expected = Array.from({ length: 20 }, (_, i) => Math.ceil(start / 1000) * 1000 + i * 1000);
    expect(ticks).toEqual(expected); // no duplicate, no gap
    expect(logs.every((l) => l.status === JobRunStatus.SUCCEEDED)).toBe(true);
    // Each run started at its tick by the shared clock, not 30 s early or late.
    expect(logs.every((l) => Number(l.startTime!.seconds) * 1000 + l.startTime!.nanos / 1e6 - tickOf(l) < 1000)).toBe(true);
  });

  it("runs an @every job once per interval across three instances", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 0));
    const [a] = [await instance(), await instance(), await instance()];
    const job = await a.client.createJob({ name: "interval", target: "Quick", schedule: "@every 5s", executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(job.id);
    await armed(instances, job.id);
    await advance(30_000);
    await expect.poll(async () => (await allLogs(a, job.id)).length).toBeGreaterThanOrEqual(6);
    const ticks = (await allLogs(a, job.id)).map(tickOf).sort((x, y) => x - y);
    // The first run on publish, then one per 5 s interval: never two within one interval.
    expect(ticks.length).toBe(6); // at 0, 5.001, 10.002 … 25.005 s
    for (let i = 1; i < ticks.length; i++) expect(ticks[i] - ticks[i - 1]).toBeGreaterThan(5000);
  });
});

describe("many jobs due at one time", () => {
  it("runs each once across three instances, under its lock, skipping a paused job and dropping a deleted one", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const [a, b, c] = [await instance(0), await instance(30_000), await instance(-30_000)];
    const policies = [ExecutePolicy.CONCURRENT, ExecutePolicy.SINGLETON, ExecutePolicy.ABANDON];
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) {
      const job = await a.client.createJob({ name: `due ${i}`, target: "Quick", schedule: "*/2 * * * * *", executePolicy: policies[i % 3], sync: i % 7 === 0 });
      await a.client.resumeJob(job.id);
      ids.push(job.id);
    }
    await armed([a, b, c], ...ids);
    // Behind the schedulers' backs (no announcement): one job paused, one deleted.
    const [paused, deleted] = [ids[10], ids[20]];
    const edit = async (id: string, change: object) => {
      const stored = JSON.parse((await redis.plain.hget("{switchyard}:jobs", id))!);
      await redis.plain.hset("{switchyard}:jobs", id, JSON.stringify({ ...stored, ...change }));
    };
    await edit(paused, { status: 2, name: 'not ,"status":1,"deleted":true, really' });
    await edit(deleted, { deleted: true });
    // Text that looks like fields, inside a string, is not read as them.
    await edit(ids[1], { name: '"executePolicy":1,"deleted":true,"status":2}' });
    await advance(2000, 500); // one tick: 12:00:02
    const tick = Date.UTC(2026, 5, 1, 12, 0, 2);
    const running = ids.filter((id) => id !== paused && id !== deleted);
    await expect.poll(async () => (await redis.plain.zcard("{switchyard}:joblogs:time"))).toBe(running.length + 1);
    for (const id of running) {
      const logs = await allLogs(a, id);
      expect(logs.map((l) => [l.status, tickOf(l)])).toEqual([[JobRunStatus.SUCCEEDED, tick]]);
      // Policies 2 and 3 ran under the lock, taken in the claim: the first fence, released after the run.
      expect(logs[0].fence).toBe(ids.indexOf(id) % 3 === 0 ? 0n : 1n);
    }
    expect(await redis.plain.keys("{switchyard}:job:lock:*")).toEqual([]);
    expect((await allLogs(a, paused)).map((l) => [l.status, l.message, tickOf(l)])).toEqual([
      [JobRunStatus.SKIPPED, "skipped: the job is paused", tick],
    ]);
    expect(await redis.plain.zcard(`{switchyard}:joblogs:${deleted}`)).toBe(0);
    expect([a, b, c].some((sy) => sy.app.scheduler.mounted().includes(deleted))).toBe(false);
    // The instance that claimed the paused job's tick unmounted it; the others find it paused on their next claim.
    expect([a, b, c].filter((sy) => !sy.app.scheduler.mounted().includes(paused)).length).toBeGreaterThanOrEqual(1);
  });
});

describe("execute policies", () => {
  const job = (sy: TestSwitchyard, policy: ExecutePolicy, target = "Slow") =>
    sy.client.createJob({ name: `policy ${policy}`, target, schedule: "* * * * * *", executePolicy: policy });

  it("singleton (2) skips ticks while a run is unfinished and logs the overlap", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    openGate();
    const [a] = [await instance(), await instance()];
    const { id } = await job(a, ExecutePolicy.SINGLETON);
    await a.client.resumeJob(id);
    await armed(instances, id);
    await advance(3000); // one run starts, two ticks find it unfinished
    gate.release();
    await expect.poll(async () => (await allLogs(a, id)).filter((l) => l.status === JobRunStatus.SUCCEEDED).length).toBe(1);
    const skipped = (await allLogs(a, id)).filter((l) => l.status === JobRunStatus.SKIPPED);
    expect(skipped).toHaveLength(2);
    expect(skipped.every((l) => l.message.includes("overlap"))).toBe(true);
    const run = (await allLogs(a, id)).find((l) => l.status === JobRunStatus.SUCCEEDED)!;
    expect(run.fence).toBe(1n); // the lock's fencing number is in the run's log
  });

  it("abandon (3) abandons a tick whose run cannot take the lock", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    openGate();
    const a = await instance();
    const { id } = await job(a, ExecutePolicy.ABANDON);
    await a.client.resumeJob(id);
    await armed([a], id);
    await advance(2000);
    gate.release();
    await expect.poll(async () => (await allLogs(a, id)).length).toBe(2);
    const logs = await allLogs(a, id);
    expect(logs.filter((l) => l.status === JobRunStatus.SKIPPED).map((l) => l.message)).toEqual([
      expect.stringContaining("abandoned: lock held"),
    ]);
  });

  it("concurrent (1) starts a run on every tick without a lock", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    openGate();
    const a = await instance();
    const { id } = await job(a, ExecutePolicy.CONCURRENT);
    await a.client.resumeJob(id);
    await armed([a], id);
    await advance(3000);
    expect(await redis.plain.exists(`{switchyard}:job:lock:${id}`)).toBe(0);
    gate.release();
    await expect.poll(async () => (await allLogs(a, id)).filter((l) => l.status === JobRunStatus.SUCCEEDED).length).toBe(3);
    expect((await allLogs(a, id)).every((l) => l.fence === 0n)).toBe(true);
  });

  it("a sync job's run holds up its own next tick on the instance; a detached one does not", async () => {
    for (const sync of [true, false]) {
      base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
      openGate();
      slowCalls = 0;
      const a = await instance();
      const { id } = await a.client.createJob({ name: `sync ${sync}`, target: "Slow", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT, sync });
      await a.client.resumeJob(id);
      await armed([a], id);
      const advancing = advance(3000);
      if (sync) {
        // The dispatch awaits the run: the clock cannot even get past the first tick until it ends.
        await expect.poll(() => slowCalls).toBe(1);
        gate.release();
        await advancing;
        await expect.poll(async () => (await allLogs(a, id)).length).toBeGreaterThanOrEqual(1);
      } else {
        await advancing;
        // Detached runs start after the tick's dispatch returns: wait for them, with the gate still shut.
        await expect.poll(() => slowCalls).toBe(3); // one run per tick, all at once
        gate.release();
      }
      await a.stop();
      instances = [];
      await redis.flushAll();
    }
  });

  it("keeps the lock through a run longer than its TTL by renewing it", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    openGate();
    const [a, b] = [await instance(), await instance()];
    const { id } = await a.client.createJob({ name: "long", target: "Slow", schedule: "0 * * * * *", executePolicy: ExecutePolicy.ABANDON });
    await a.client.resumeJob(id);
    await armed(instances, id);
    await advance(60_000, 1000); // the first run starts at :00 of the next minute
    await advance(400_000, 5000); // 400 s: past the 300 s TTL; later ticks find the lock held
    const lock = await redis.plain.get(`{switchyard}:job:lock:${id}`);
    expect(lock).toMatch(/:1:\d+$/); // still the first run's lock, fence 1
    const expires = Number(lock!.split(":").pop());
    expect(expires).toBeGreaterThan(base.now());
    const logs = await allLogs(b, id);
    expect(logs.filter((l) => l.status === JobRunStatus.SKIPPED).length).toBeGreaterThanOrEqual(6);
    expect(logs.every((l) => l.status === JobRunStatus.SKIPPED)).toBe(true);
    gate.release();
    await expect.poll(async () => (await allLogs(b, id)).some((l) => l.status === JobRunStatus.SUCCEEDED)).toBe(true);
    expect(await redis.plain.exists(`{switchyard}:job:lock:${id}`)).toBe(0);
  });
});

describe("self-healing and misfires", () => {
  it("unmounts a job paused behind the scheduler's back when it fires, logging why", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const { id } = await a.client.createJob({ name: "edited", target: "Quick", schedule: "* * * * * *" });
    await a.client.resumeJob(id);
    await armed([a], id);
    const stored = JSON.parse((await redis.plain.hget("{switchyard}:jobs", id))!);
    await redis.plain.hset("{switchyard}:jobs", id, JSON.stringify({ ...stored, status: 2 })); // no announcement
    await advance(1000);
    expect(a.app.scheduler.mounted()).not.toContain(id);
    const logs = await allLogs(a, id);
    expect(logs.map((l) => [l.status, l.message])).toEqual([[JobRunStatus.SKIPPED, "skipped: the job is paused"]]);
  });

  it("skips ticks missed while every instance was down, or runs the latest once within the catch-up window", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    let a = await instance();
    const skip = await a.client.createJob({ name: "skip", target: "Quick", schedule: "0 * * * * *" });
    const catchUp = await a.client.createJob({
      name: "catch up", target: "Quick", schedule: "0 * * * * *", misfirePolicy: 2, catchUpWindow: { seconds: 600n },
    });
    await a.client.resumeJob(skip.id);
    await a.client.resumeJob(catchUp.id);
    await a.stop();
    instances = [];
    await base.advance(5 * 60_000 + 10_000); // five minutes with no instance up: the latest tick is 10 s late
    a = await instance();
    await expect.poll(async () => (await allLogs(a, skip.id)).length).toBe(1);
    await expect.poll(async () => (await allLogs(a, catchUp.id)).length).toBe(1);
    const [skipped] = await allLogs(a, skip.id);
    expect(skipped.status).toBe(JobRunStatus.SKIPPED);
    expect(skipped.message).toContain("misfire, 5 tick(s)");
    const [caught] = await allLogs(a, catchUp.id);
    expect(caught.status).toBe(JobRunStatus.SUCCEEDED);
    expect(caught.trigger).toBe(3); // CATCH_UP
    expect(tickOf(caught)).toBe(Date.UTC(2026, 5, 1, 12, 5, 0));
  });

  it("owes nothing for the old schedule's past ticks when a running job is rescheduled", async () => {
    base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const { id } = await a.client.createJob({ name: "hourly", target: "Quick", schedule: "0 0 * * * *" });
    await a.client.resumeJob(id);
    await advance(30 * 60_000, 60_000);
    await a.client.updateJob({ id, schedule: "0 * * * * *" }, ["schedule"]);
    await armed([a], id);
    await advance(60_000, 1000);
    await expect.poll(async () => (await allLogs(a, id)).length).toBe(1);
    const [run] = await allLogs(a, id);
    expect(run.status).toBe(JobRunStatus.SUCCEEDED);
    expect(tickOf(run)).toBe(Date.UTC(2026, 5, 1, 12, 31, 0));
  });
});
