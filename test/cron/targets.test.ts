/** Handler and queue targets (SPEC C7–C9, seed 001 §2 and §4). */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobRunStatus, JobTrigger, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;
const seen: { name: string; jobId: string; params: string }[] = [];

const handlers: Record<string, JobHandler> = {
  Explode: async (ctx, params) => {
    seen.push({ name: "Explode", jobId: ctx.jobId, params });
    throw new Error("disk on fire");
  },
  ExplodeSync: (ctx) => {
    seen.push({ name: "ExplodeSync", jobId: ctx.jobId, params: "" });
    throw new TypeError("thrown before any await"); // not even a rejected promise
  },
  Count: async (ctx, params) => {
    seen.push({ name: "Count", jobId: ctx.jobId, params });
    return `counted ${seen.filter((s) => s.name === "Count").length}`;
  },
};

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis, { handlers });
  clock = sy.clock as ManualClock;
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

const logsOf = async (jobId: string) => (await sy.client.listJobLogs(jobId)).logs;

/** Runs the job once and waits (by polling, with a deadline) for its log entry. */
async function runAndWait(jobId: string): Promise<JobLog> {
  const runId = await sy.client.runOnce(jobId);
  await expect.poll(async () => (await logsOf(jobId)).map((l) => l.id), { timeout: 10_000 }).toContain(runId);
  return (await logsOf(jobId)).find((l) => l.id === runId)!;
}

const job = (target: string, params = "", extra: Record<string, unknown> = {}) =>
  sy.client.createJob({ name: `target ${target}`, target, params, schedule: "0 0 3 * * *", ...extra });

describe("handler targets", () => {
  it("runs HelloWorld", async () => {
    const entry = await runAndWait((await job("HelloWorld")).id);
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toBe("hello world");
    expect(entry.error).toBe("");
    expect(entry.trigger).toBe(JobTrigger.RUN_ONCE);
    expect(entry.instanceId).toBe(sy.app.scheduler.instanceId);
  });

  it("runs SendSms, which logs its params", async () => {
    const params = '{"phone":"+4915112345678","text":"your code is 4711"}';
    const entry = await runAndWait((await job("SendSms", params)).id);
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toContain(params);
  });

  it("fails a target naming no registered handler", async () => {
    const entry = await runAndWait((await job("NoSuchTask")).id);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("no handler registered for");
    expect(entry.error).toContain("NoSuchTask");
  });

  it("passes params to an extra handler and logs what it returns", async () => {
    const { id } = await job("Count", '{"n":3}');
    const entry = await runAndWait(id);
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toBe("counted 1");
    expect(seen).toContainEqual({ name: "Count", jobId: id, params: '{"n":3}' });
  });

  it("fails the run of a throwing handler with its message, and the scheduler keeps firing", async () => {
    const explode = await job("Explode", "", { sync: true });
    const explodeSync = await job("ExplodeSync");
    const healthy = await job("HelloWorld");
    for (const j of [explode, explodeSync, healthy]) {
      await sy.client.updateJob({ id: j.id, schedule: "* * * * * *" }, ["schedule"]);
      await sy.client.resumeJob(j.id);
    }
    await expect.poll(() => [explode.id, explodeSync.id, healthy.id].every((id) => sy.app.scheduler.mounted().includes(id))).toBe(true);
    await Promise.all([explode.id, explodeSync.id, healthy.id].map((id) => sy.app.scheduler.refresh(id))); // armed, not only mounted

    for (let second = 1; second <= 3; second++) {
      await clock.advance(1000);
      for (const j of [explode, explodeSync, healthy]) {
        await expect.poll(async () => (await logsOf(j.id)).length, { timeout: 10_000, message: `${j.target} after ${second} s` }).toBe(second);
      }
    }
    for (const entry of await logsOf(explode.id)) {
      expect(entry.status).toBe(JobRunStatus.FAILED);
      expect(entry.error).toContain("disk on fire");
      expect(entry.trigger).toBe(JobTrigger.SCHEDULE);
    }
    for (const entry of await logsOf(explodeSync.id)) {
      expect(entry.status).toBe(JobRunStatus.FAILED);
      expect(entry.error).toContain("thrown before any await");
    }
    const healthyLogs = await logsOf(healthy.id);
    expect(healthyLogs.map((l) => l.status)).toEqual([JobRunStatus.SUCCEEDED, JobRunStatus.SUCCEEDED, JobRunStatus.SUCCEEDED]);
    // The execution locks of the failed runs were released: nothing was skipped as an overlap.
    expect(await redis.plain.exists(`{switchyard}:job:lock:${explode.id}`, `{switchyard}:job:lock:${explodeSync.id}`)).toBe(0);

    // A later RunOnce of another job still succeeds.
    expect((await runAndWait((await job("HelloWorld")).id)).status).toBe(JobRunStatus.SUCCEEDED);
    for (const j of [explode, explodeSync, healthy]) await sy.client.pauseJob(j.id);
  });

  it("refuses to start when an extra handler takes a built-in's name", async () => {
    await expect(startSwitchyard(redis, { handlers: { HelloWorld: async () => "impostor" } })).rejects.toThrow(/HelloWorld.*already registered/);
    await expect(startSwitchyard(redis, { handlers: { LogClean: async () => "impostor" } })).rejects.toThrow(/LogClean/);
    // The running instance is unaffected.
    expect((await runAndWait((await job("HelloWorld")).id)).message).toBe("hello world");
  });
});

describe("queue targets", () => {
  it("enqueues params onto a declared queue for a worker to lease", async () => {
    const Q = "{cron-out}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const created = await job(`queue:${Q}`, '{"x":1}');
    await sy.client.updateJob({ id: created.id, schedule: "* * * * * *" }, ["schedule"]);
    await sy.client.resumeJob(created.id);
    await expect.poll(() => sy.app.scheduler.mounted()).toContain(created.id);
    const tickMs = clock.now() + 1000;

    await clock.advance(1000);
    await sy.client.pauseJob(created.id); // one tick is enough
    const worker = sy.client.lease(Q, 1);
    const [delivery] = await worker.take(1);
    expect(Buffer.from(delivery.payload).toString("utf8")).toBe('{"x":1}');
    expect(delivery.queue).toBe(Q);
    expect(delivery.headers["switchyard-job-id"]).toBe(created.id);
    expect(delivery.headers["switchyard-tick-time"]).toBe(new Date(tickMs).toISOString());
    await sy.client.ack(delivery.leaseToken);
    await worker.close();
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.llen(Q)).toBe(0);

    await expect.poll(async () => (await logsOf(created.id)).length, { timeout: 10_000 }).toBe(1);
    const [entry] = await logsOf(created.id);
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.trigger).toBe(JobTrigger.SCHEDULE);
    expect(Number(entry.tickTime?.seconds) * 1000).toBe(tickMs);
    expect(entry.message).toBe(`enqueued item ${delivery.id} onto ${Q}`);
  });

  it("fails a run whose queue is not declared, naming the queue", async () => {
    const entry = await runAndWait((await job("queue:{nowhere}", '{"x":1}')).id);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("{nowhere}");
    expect(await redis.plain.exists("{nowhere}")).toBe(0);
  });
});
