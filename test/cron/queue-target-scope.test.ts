/**
 * Issue 12, defect 2: a job whose target is `queue:X` enqueues onto X when it
 * runs, so CreateJob, UpdateJob, RunOnce, ResumeJob and SetJobStatus(RUNNING)
 * of such a job need queue:enqueue on X besides their sys:job scope; a caller refused Enqueue on {payments}
 * cannot enqueue there through a job. Real gRPC, real Redis, real tokens.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenHash } from "../../src/auth/authenticator.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { Code, statusOf } from "../helpers/grpc-status.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const PAYMENTS = "{payments}";
const JOBS = ["sys:job:list", "sys:job:add", "sys:job:update", "sys:job:execute", "sys:job:pause", "sys:job:resume", "sys:job:delete"];
const TOKENS: Record<string, string[]> = {
  admin: ["*"],
  // Every job scope, and enqueue on other queues only.
  scheduler: [...JOBS, "queue:enqueue:cache.*"],
  payer: [...JOBS, `queue:enqueue:${PAYMENTS}`],
};

let redis: TestRedis;
let sy: TestSwitchyard;
const secrets = new Map(Object.keys(TOKENS).map((name) => [name, randomBytes(24).toString("base64url")]));
const clients: SwitchyardClient[] = [];
const as = (name: string) => {
  const c = new SwitchyardClient(sy.address, { token: secrets.get(name) });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  redis = await startRedis();
  const config = Object.entries(TOKENS).map(([name, scopes]) => ({ name, sha256: tokenHash(secrets.get(name)!), scopes }));
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: JSON.stringify(config) } });
  await as("admin").createQueue({ name: PAYMENTS, mode: QueueMode.SIMPLE });
  await as("admin").createQueue({ name: "cache.warmups", mode: QueueMode.SIMPLE });
});
afterAll(async () => {
  for (const c of clients) c.close();
  await sy?.stop();
  await redis?.stop();
});

const ready = async () => Number((await as("admin").getQueueStats(PAYMENTS)).ready);

describe("a queue target needs queue:enqueue on its queue", () => {
  it("CreateJob with target queue:{payments} is PERMISSION_DENIED naming the scope, and nothing is saved", async () => {
    const before = (await as("admin").listJobs()).jobs.length;
    const r = await statusOf(as("scheduler").createJob({ name: "pay", target: `queue:${PAYMENTS}`, schedule: "0 0 3 * * *", params: "{}" }));
    expect(r.code, r.details).toBe(Code.PERMISSION_DENIED);
    expect(r.details).toContain(`queue:enqueue:${PAYMENTS}`);
    expect((await as("admin").listJobs()).jobs.length).toBe(before);
    // The same caller may target a queue it may enqueue onto, and a holder of enqueue on {payments} may target it.
    await as("scheduler").createJob({ name: "warm", target: "queue:cache.warmups", schedule: "0 0 3 * * *" });
    await as("payer").createJob({ name: "pay", target: `queue:${PAYMENTS}`, schedule: "0 0 3 * * *" });
  });

  it("UpdateJob to target {payments}, or of a job that targets it, is PERMISSION_DENIED and changes nothing", async () => {
    const own = await as("scheduler").createJob({ name: "mine", target: "HelloWorld", schedule: "0 0 3 * * *" });
    const toPayments = await statusOf(as("scheduler").updateJob({ id: own.id, target: `queue:${PAYMENTS}` }, ["target"]));
    expect(toPayments.code, toPayments.details).toBe(Code.PERMISSION_DENIED);
    // With an empty mask every populated field is an update: the target too.
    const noMask = await statusOf(as("scheduler").updateJob({ ...own, target: `queue:${PAYMENTS}`, remark: "x" }));
    expect(noMask.code, noMask.details).toBe(Code.PERMISSION_DENIED);
    expect((await as("admin").getJob(own.id)).target).toBe("HelloWorld");

    const pay = await as("payer").createJob({ name: "payroll", target: `queue:${PAYMENTS}`, schedule: "0 0 3 * * *", params: "{}" });
    const reschedule = await statusOf(as("scheduler").updateJob({ id: pay.id, schedule: "* * * * * *" }, ["schedule"]));
    expect(reschedule.code, reschedule.details).toBe(Code.PERMISSION_DENIED);
    expect(reschedule.details).toContain(`queue:enqueue:${PAYMENTS}`);
    expect((await as("admin").getJob(pay.id)).schedule).toBe("0 0 3 * * *");
    await as("payer").updateJob({ id: pay.id, remark: "checked" }, ["remark"]);
    // What is checked is the job as updated: moving it off the queue enqueues nothing there.
    expect((await as("scheduler").updateJob({ id: pay.id, target: "HelloWorld" }, ["target"])).target).toBe("HelloWorld");
  });

  it("RunOnce of a job that targets {payments} is PERMISSION_DENIED and enqueues nothing", async () => {
    const pay = await as("payer").createJob({ name: "payout", target: `queue:${PAYMENTS}`, schedule: "0 0 3 * * *", params: '{"amount":1}' });
    const before = await ready();
    const r = await statusOf(as("scheduler").runOnce(pay.id));
    expect(r.code, r.details).toBe(Code.PERMISSION_DENIED);
    expect(r.details).toContain(`queue:enqueue:${PAYMENTS}`);
    // The holder of the scope runs it: the item arrives, so the refused call would have been seen by now.
    await as("payer").runOnce(pay.id);
    await expect.poll(ready).toBe(before + 1);
  });

  it("ResumeJob or SetJobStatus(RUNNING) of a job that targets {payments} is PERMISSION_DENIED and leaves it as it was", async () => {
    const pay = await as("payer").createJob({ name: "payday", target: `queue:${PAYMENTS}`, schedule: "0 0 3 * * *" });
    for (const publish of [() => as("scheduler").resumeJob(pay.id), () => as("scheduler").setJobStatus(pay.id, JobStatus.RUNNING)]) {
      const r = await statusOf(publish());
      expect(r.code, r.details).toBe(Code.PERMISSION_DENIED);
      expect(r.details).toContain(`queue:enqueue:${PAYMENTS}`);
      expect((await as("admin").getJob(pay.id)).status).toBe(JobStatus.UNPUBLISHED);
    }
    // Stopping it needs no enqueue scope; running it again does.
    await as("payer").resumeJob(pay.id);
    expect((await as("scheduler").pauseJob(pay.id)).status).toBe(JobStatus.PAUSED);
    expect((await statusOf(as("scheduler").resumeJob(pay.id))).code).toBe(Code.PERMISSION_DENIED);
    expect((await as("payer").setJobStatus(pay.id, JobStatus.RUNNING)).status).toBe(JobStatus.RUNNING);
  });
});
