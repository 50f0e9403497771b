/**
 * Issue 12's scheduler defects, each on real instances sharing one real Redis
 * and one ManualClock: a mount just after a tick (5), a stale snapshot against
 * a newer mount (10), two updates in one millisecond (9). A stale claim reply
 * (8) needs its answers held at a link: stale-claim-reply.test.ts.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock, type Clock, type Timer } from "../../src/clock.js";
import { ExecutePolicy, JobRunStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { scrape, key } from "../helpers/http.js";
import { createLogger } from "../../src/log.js";

let redis: TestRedis;
let clock: ManualClock;
let instances: TestSwitchyard[] = [];

/** A run the test holds open until it releases it. */
let gate = { calls: 0, release: () => {}, wait: Promise.resolve() };
function closeGate(): void {
  let release!: () => void;
  const wait = new Promise<void>((ok) => (release = ok));
  gate = { calls: 0, release, wait };
}
/**
 * An instance's clock that a run can move on by itself: `ManualClock` plus
 * `spent`, as if the run took that long (ManualClock.advance, which fires
 * timers, cannot be called from inside one of them).
 */
class BusyClock implements Clock {
  spent = 0;
  constructor(private readonly base: ManualClock) {}
  now(): number {
    return this.base.now() + this.spent;
  }
  setTimer(ms: number, fn: () => unknown): Timer {
    return this.base.setTimer(ms, fn);
  }
}
let busy: BusyClock | undefined;

const handlers: Record<string, JobHandler> = {
  Quick: async () => "done",
  /** The first run takes 7.5 s by its instance's clock, the next ones no time. */
  Long: async () => {
    if (busy!.spent === 0) busy!.spent += 7_500;
    return "long";
  },
  /** The first run takes 150.5 s by its instance's clock, the next ones no time. */
  VeryLong: async () => {
    if (busy!.spent === 0) busy!.spent += 150_500;
    return "very long";
  },
  Gate: async () => {
    gate.calls++;
    await gate.wait;
    return "released";
  },
};

async function instance(): Promise<TestSwitchyard> {
  const sy = await startSwitchyard(redis, { clock, handlers });
  instances.push(sy);
  return sy;
}

async function stop(sy: TestSwitchyard): Promise<void> {
  instances = instances.filter((i) => i !== sy);
  await sy.stop();
}

async function logsOf(sy: TestSwitchyard, id: string): Promise<JobLog[]> {
  return (await sy.client.listJobLogs(id, 1000)).logs;
}

const tickOf = (l: JobLog) => Number(l.tickTime!.seconds) * 1000 + l.tickTime!.nanos / 1e6;

/** Waits until `sy` has mounted and armed each job (a mount shows before its catch-up read returns). */
async function armed(sy: TestSwitchyard, ...ids: string[]): Promise<void> {
  await expect.poll(() => ids.every((id) => sy.app.scheduler.mounted().includes(id))).toBe(true);
  await Promise.all(ids.map((id) => sy.app.scheduler.refresh(id)));
}

/** The job ids an instance last recorded as mounted (its heartbeat, written within 100 ms of a change). */
async function recordedMounts(instanceId: string): Promise<string[]> {
  const json = await redis.plain.hget("{switchyard}:cron:instances", instanceId);
  return json ? (JSON.parse(json) as { mounted: string[] }).mounted : [];
}

beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  gate.release();
  await Promise.all(instances.map((i) => i.stop()));
  instances = [];
  await redis.flushAll();
});
afterAll(async () => redis.stop());

describe("defect 5: misfires are judged by lateness, not by mount time", () => {
  it("runs a tick claimed in catch-up 5 ms after it fell due (an instance starting just after it)", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const { id } = await a.client.createJob({ name: "ten", target: "Quick", schedule: "*/10 * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(id);
    await armed(a, id);
    await stop(a);
    await clock.advance(9_505); // 12:00:10.005, with no instance up at 12:00:10
    const b = await instance();
    await expect.poll(async () => (await logsOf(b, id)).length).toBe(1);
    const [run] = await logsOf(b, id);
    expect([run.status, run.message, run.trigger]).toEqual([JobRunStatus.SUCCEEDED, "done", 1]); // SCHEDULE
    expect(tickOf(run)).toBe(Date.UTC(2026, 5, 1, 12, 0, 10));
  });

  it("still skips a tick claimed later than the misfire grace, and logs the earlier missed ticks when the latest is on time", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const late = await a.client.createJob({ name: "late", target: "Quick", schedule: "0 * * * * *" });
    const onTime = await a.client.createJob({ name: "on time", target: "Quick", schedule: "*/10 * * * * *" });
    await a.client.resumeJob(late.id);
    await a.client.resumeJob(onTime.id);
    await stop(a);
    await clock.advance(69_600); // 12:01:10.100: "late" missed 12:01:00 by 10 s; "on time" missed 12:00:10 … 12:01:00, and 12:01:10 is 100 ms ago
    const b = await instance();
    await expect.poll(async () => (await logsOf(b, late.id)).length).toBe(1);
    await expect.poll(async () => (await logsOf(b, onTime.id)).length).toBe(2);
    const [skipped] = await logsOf(b, late.id);
    expect([skipped.status, skipped.message]).toEqual([JobRunStatus.SKIPPED, "skipped: misfire, 1 tick(s) since 2026-06-01T12:01:00.000Z fired no run in time (10 s late)"]);
    const logs = (await logsOf(b, onTime.id)).sort((x, y) => tickOf(x) - tickOf(y));
    expect(logs.map((l) => [l.status, tickOf(l)])).toEqual([
      [JobRunStatus.SKIPPED, Date.UTC(2026, 5, 1, 12, 0, 10)],
      [JobRunStatus.SUCCEEDED, Date.UTC(2026, 5, 1, 12, 1, 10)],
    ]);
    expect(logs[0].message).toBe("skipped: misfire, 6 tick(s) since 2026-06-01T12:00:10.000Z fired no run in time");
  });
});

describe("defect 9: two updates in one millisecond", () => {
  it("mounts the second, not the superseded schedule, though both carry the same update time", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const { id } = await a.client.createJob({ name: "twice", target: "Quick", schedule: "0 0 * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(id);
    await armed(a, id);
    // The clock does not move between the two: both updates are stamped 12:00:00.500.
    await a.client.updateJob({ id, schedule: "0 * * * * *" }, ["schedule"]);
    await a.app.scheduler.refresh(id); // the first is mounted before the second is written
    const second = await a.client.updateJob({ id, schedule: "*/10 * * * * *" }, ["schedule"]);
    expect(second.updateTime).toEqual((await a.client.getJob(id)).updateTime);
    await a.app.scheduler.refresh(id);
    await clock.advance(30_000);
    // Every 10 s (12:00:10, :20, :30), not at the minute (the superseded schedule: no run in these 30 s).
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(3);
    const ticks = (await logsOf(a, id)).map(tickOf).sort((x, y) => x - y);
    expect(ticks).toEqual([10, 20, 30].map((s) => Date.UTC(2026, 5, 1, 12, 0, s)));
  });
});

describe("defect 10: the first resync at start-up keeps changes made while it runs", () => {
  it("neither unmounts a job resumed nor remounts the old schedule of a job updated while it mounts job after job", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    closeGate();
    const a = await instance();
    // "hold" is mounted first (lowest id): its catch-up run is sync, so the start-up resync waits on it.
    const hold = await a.client.createJob({
      name: "hold", target: "Gate", schedule: "0 * * * * *", sync: true, executePolicy: ExecutePolicy.CONCURRENT,
      misfirePolicy: 2, catchUpWindow: { seconds: 600n },
    });
    const resumed = await a.client.createJob({ name: "resumed", target: "Quick", schedule: "*/10 * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    const updated = await a.client.createJob({ name: "updated", target: "Quick", schedule: "0 0 * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(hold.id);
    await a.client.resumeJob(updated.id);
    await stop(a);
    await clock.advance(60_000); // 12:01:00.500: "hold" missed 12:01:00 with no instance up

    const starting = startSwitchyard(redis, { clock, handlers });
    await expect.poll(() => gate.calls).toBe(1); // b's resync has read every job and waits in "hold"'s run
    const c = await instance(); // c claims nothing: b has claimed "hold"'s tick
    await c.client.resumeJob(resumed.id);
    await c.client.updateJob({ id: updated.id, schedule: "*/10 * * * * *" }, ["schedule"]);
    // b applies both announcements while its resync still waits.
    const ours = (ids: string[]) => ids.filter((id) => [hold.id, resumed.id, updated.id].includes(id)); // not the built-in LogClean
    const bId = async () => (await c.client.getSchedulerStatus()).instances.find((s) => s.instanceId !== c.app.scheduler.instanceId)?.instanceId;
    await expect.poll(async () => {
      const id = await bId();
      return id ? ours(await recordedMounts(id)) : [];
    }).toEqual([hold.id, resumed.id, updated.id]);
    gate.release();
    const b = await starting;
    instances.push(b);
    await stop(c);
    expect(ours(b.app.scheduler.mounted())).toEqual([hold.id, resumed.id, updated.id]);
    await clock.advance(10_000); // 12:01:10: both run on the new schedules
    await expect.poll(async () => (await logsOf(b, resumed.id)).map(tickOf)).toEqual([Date.UTC(2026, 5, 1, 12, 1, 10)]);
    await expect.poll(async () => (await logsOf(b, updated.id)).map(tickOf)).toEqual([Date.UTC(2026, 5, 1, 12, 1, 10)]);
  });
});

describe("defect 14: ticks that fall during a sync run", () => {
  it("each leave a log entry and a skipped-tick metric: 9 ticks, 9 entries", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    busy = new BusyClock(clock);
    const a = await startSwitchyard(redis, { clock: busy, handlers });
    instances.push(a);
    const { id } = await a.client.createJob({ name: "sync", target: "Long", schedule: "* * * * * *", sync: true, executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(id);
    await armed(a, id);
    const before = (await scrape(a.app.httpAddress)).get(key("switchyard_job_ticks_skipped_total", { reason: "overlap" })) ?? 0;
    // 12:00:01: the run takes until 12:00:08.5 (12:00:02 … 12:00:08 fall during it); the next, at 12:00:09, is quick.
    await clock.advance(1000);
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(9);
    const logs = (await logsOf(a, id)).sort((x, y) => tickOf(x) - tickOf(y));
    expect(logs.map(tickOf)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9].map((s) => Date.UTC(2026, 5, 1, 12, 0, s)));
    expect([logs[0].status, logs[8].status]).toEqual([JobRunStatus.SUCCEEDED, JobRunStatus.SUCCEEDED]);
    for (const skipped of logs.slice(1, 8)) {
      expect([skipped.status, skipped.message]).toEqual([JobRunStatus.SKIPPED, "skipped: overlap, the sync run of 2026-06-01T12:00:01.000Z was still running"]);
    }
    const after = (await scrape(a.app.httpAddress)).get(key("switchyard_job_ticks_skipped_total", { reason: "overlap" })) ?? 0;
    expect(after - before).toBe(7);
  });
});

describe("defect 14, past a hundred outlasted ticks", () => {
  it("logs the first hundred one by one and the rest in one entry", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    busy = new BusyClock(clock);
    const a = await startSwitchyard(redis, { clock: busy, handlers });
    instances.push(a);
    const { id } = await a.client.createJob({ name: "sync", target: "VeryLong", schedule: "* * * * * *", sync: true, executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(id);
    await armed(a, id);
    await clock.advance(1000); // 12:00:01, running until 12:02:31.5: 150 ticks fall during it
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(103); // the run, 100 skipped, one for the other 50, the next run
    const logs = (await logsOf(a, id)).sort((x, y) => tickOf(x) - tickOf(y));
    expect(logs.slice(1, 101).every((l) => l.status === JobRunStatus.SKIPPED)).toBe(true);
    expect(tickOf(logs[101])).toBe(Date.UTC(2026, 5, 1, 12, 1, 42));
    expect(logs[101].message).toBe(
      "skipped: overlap, the sync run of 2026-06-01T12:00:01.000Z was still running (50 ticks, to 2026-06-01T12:02:31.000Z)",
    );
    expect([logs[102].status, tickOf(logs[102])]).toEqual([JobRunStatus.SUCCEEDED, Date.UTC(2026, 5, 1, 12, 2, 32)]);
  });
});

describe("suspected: a paused interval job's claim", () => {
  it("records no last run: resumed after its interval, the job runs at once", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 0));
    // No resync within the test: it would see the pause below before the claim does.
    const a = await startSwitchyard(redis, { clock, handlers, config: { schedulerResyncMs: 3_600_000 } });
    instances.push(a);
    const { id } = await a.client.createJob({ name: "minutely", target: "Quick", schedule: "@every 60s", executePolicy: ExecutePolicy.CONCURRENT });
    await a.client.resumeJob(id);
    await armed(a, id);
    await clock.advance(0); // the first run, at once: 12:00:00
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(1);
    await clock.advance(30_000);
    // Paused behind the scheduler's back (as a pause racing the claim): the claim at 12:01:00.001 finds it paused.
    const stored = JSON.parse((await redis.plain.hget("{switchyard}:jobs", id))!);
    await redis.plain.hset("{switchyard}:jobs", id, JSON.stringify({ ...stored, status: 2 }));
    await clock.advance(31_000);
    await expect.poll(async () => (await logsOf(a, id)).map((l) => l.message)).toContain("skipped: the job is paused");
    expect(a.app.scheduler.mounted()).not.toContain(id);
    await clock.advance(4_000); // 12:01:05: the last real run is 65 s old
    await a.client.resumeJob(id);
    await armed(a, id);
    await clock.advance(0);
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(3);
    const run = (await logsOf(a, id)).sort((x, y) => tickOf(x) - tickOf(y))[2];
    expect([run.status, tickOf(run)]).toEqual([JobRunStatus.SUCCEEDED, Date.UTC(2026, 5, 1, 12, 1, 5)]);
  });
});

describe("suspected: a failed tick claim", () => {
  it("leaves a job-log entry saying so, and counts a skipped tick", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const a = await instance();
    const { id } = await a.client.createJob({ name: "claimless", target: "Quick", schedule: "* * * * * *" });
    await a.client.resumeJob(id);
    await armed(a, id);
    // The ticks hash as the wrong type: claim-ticks.lua fails on it (a stand-in for any failed claim); the log keys still work.
    await redis.plain.set("{switchyard}:cron:ticks", "not a hash");
    const before = (await scrape(a.app.httpAddress)).get(key("switchyard_job_ticks_skipped_total", { reason: "claim_failed" })) ?? 0;
    await clock.advance(1000);
    await expect.poll(async () => (await logsOf(a, id)).length).toBe(1);
    const [entry] = await logsOf(a, id);
    expect(entry.status).toBe(JobRunStatus.SKIPPED);
    expect(tickOf(entry)).toBe(Date.UTC(2026, 5, 1, 12, 0, 1));
    expect(entry.message).toMatch(/^skipped: the tick could not be claimed \(.*WRONGTYPE.*\); another instance may have run it$/);
    const after = (await scrape(a.app.httpAddress)).get(key("switchyard_job_ticks_skipped_total", { reason: "claim_failed" })) ?? 0;
    expect(after - before).toBe(1);
  });
});

describe("suspected: job-log.ts ignored EXEC errors", () => {
  it("reports a log entry whose transaction failed inside EXEC, instead of taking it for written", async () => {
    clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 0));
    const lines: string[] = [];
    const a = await startSwitchyard(redis, { clock, handlers, log: createLogger("error", (line) => void lines.push(line)) });
    instances.push(a);
    const { id } = await a.client.createJob({ name: "logless", target: "Quick", schedule: "0 0 3 * * *" });
    // The by-time index as the wrong type: its ZADD fails inside EXEC, after the entry's HSET was applied.
    await redis.plain.set("{switchyard}:joblogs:time", "not a sorted set");
    await a.client.runOnce(id);
    await expect.poll(() => lines.filter((l) => l.includes("could not write a job log entry")).length).toBe(1);
    expect(lines.find((l) => l.includes("could not write a job log entry"))).toContain("WRONGTYPE");
  });
});
