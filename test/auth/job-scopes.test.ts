/**
 * Seed 001's `sys:job:*` (issue 12, seed conformance): accepted as a scope at
 * start-up, it grants the seven job scopes and nothing else. Real gRPC, real Redis.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenHash } from "../../src/auth/authenticator.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { loadConfig } from "../../src/config.js";
import { Code, statusOf } from "../helpers/grpc-status.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const secret = randomBytes(24).toString("base64url");
const TOKENS = JSON.stringify([{ name: "jobs", sha256: tokenHash(secret), scopes: ["sys:job:*"] }]);

let redis: TestRedis;
let sy: TestSwitchyard;
let jobs: SwitchyardClient;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: TOKENS } });
  jobs = new SwitchyardClient(sy.address, { token: secret });
});
afterAll(async () => {
  jobs?.close();
  await sy?.stop();
  await redis?.stop();
});

describe("sys:job:*", () => {
  it("is a scope the configuration accepts, as written", () => {
    expect(loadConfig({ SWITCHYARD_AUTH_TOKENS: TOKENS }).auth.tokens[0].scopes.map((g) => g.text)).toEqual(["sys:job:*"]);
  });

  it("grants all seven job scopes: add, list, update, pause, resume, execute, delete", async () => {
    const job = await jobs.createJob({ name: "seed", target: "HelloWorld", schedule: "0 0 3 * * *" }); // sys:job:add
    expect((await jobs.getJob(job.id)).name).toBe("seed"); // sys:job:list
    await jobs.listJobLogs(job.id);
    await jobs.updateJob({ id: job.id, remark: "edited" }, ["remark"]); // sys:job:update
    await jobs.resumeJob(job.id); // sys:job:resume
    await jobs.pauseJob(job.id); // sys:job:pause
    await jobs.runOnce(job.id); // sys:job:execute
    await jobs.deleteJob(job.id); // sys:job:delete
    expect((await statusOf(jobs.getJob(job.id))).code).toBe(Code.NOT_FOUND);
  });

  it("grants nothing else: the audit log and queues stay closed", async () => {
    const audit = await statusOf(jobs.listAuditLogs());
    expect([audit.code, audit.details]).toEqual([Code.PERMISSION_DENIED, expect.stringContaining("sys:audit:list")]);
    expect((await statusOf(jobs.listQueues())).code).toBe(Code.PERMISSION_DENIED);
    // And not a queue target: that needs queue:enqueue on the queue.
    expect((await statusOf(jobs.createJob({ name: "q", target: "queue:{payments}", schedule: "0 0 3 * * *" }))).code).toBe(Code.PERMISSION_DENIED);
  });
});
