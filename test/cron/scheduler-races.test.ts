/**
 * Issue 12's scheduler defects, each on real instances sharing one real Redis
 * and one ManualClock: a mount just after a tick (5), a stale claim or
 * snapshot against a newer mount (8, 10), two updates in one millisecond (9).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { ExecutePolicy, JobRunStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

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
const handlers: Record<string, JobHandler> = {
  Quick: async () => "done",
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
