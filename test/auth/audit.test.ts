/**
 * SPEC S6, C11, issue 6 "What it must show" 3: every mutating call leaves an
 * audit entry (who, what, when, result) that ListAuditLogs reads back; reads
 * and unauthenticated calls leave none; LogClean removes old entries; a job's
 * create/update actor is the caller.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { AuditLogStore } from "../../src/auth/audit-log.js";
import { systemKeys } from "../../src/redis/keys.js";
import { connectRedis } from "../../src/redis/connection.js";
import { createLogger } from "../../src/log.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { JobRunStatus, JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { AuditLog } from "../../src/gen/switchyard/v1/audit_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const DAY = 86_400_000;
const names = ["ops", "editor", "viewer", "auditor"] as const;
const scopes: Record<(typeof names)[number], string[]> = {
  ops: ["*"],
  editor: ["sys:job:update", "sys:job:list"],
  viewer: ["sys:job:list", "queue:enqueue"],
  auditor: ["sys:audit:list"],
};
const tokens = Object.fromEntries(names.map((n) => [n, randomBytes(24).toString("base64url")])) as Record<(typeof names)[number], string>;

let redis: TestRedis;
let sy: TestSwitchyard;
const clients: Record<string, SwitchyardClient> = {};

beforeAll(async () => {
  const config = names.map((name) => ({ name, sha256: tokenHash(tokens[name]), scopes: scopes[name] }));
  redis = await startRedis();
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: JSON.stringify(config) } });
  for (const name of names) clients[name] = new SwitchyardClient(sy.address, { token: tokens[name] });
});
afterAll(async () => {
  for (const c of Object.values(clients)) c.close();
  await sy?.stop();
  await redis?.stop();
});

/** Every audit entry, newest first, read page by page through ListAuditLogs. */
async function allEntries(pageSize = 4): Promise<AuditLog[]> {
  const out: AuditLog[] = [];
  let token = "";
  do {
    const page = await clients.auditor.listAuditLogs(pageSize, token);
    expect(page.logs.length).toBeLessThanOrEqual(pageSize);
    out.push(...page.logs);
    token = page.nextPageToken;
  } while (token);
  return out;
}

const failed = (p: Promise<unknown>) => p.then(() => grpc.status.OK, (e: grpc.ServiceError) => e.code);

describe("the audit log", () => {
  it("records every mutating call with who, what, when and the result, and nothing else", async () => {
    const { ops, editor, viewer } = clients;
    const before = (await allEntries()).length;
    const start = sy.clock.now();

    await ops.createQueue({ name: "{audited}", mode: QueueMode.RELIABLE });
    await viewer.enqueue("{audited}", ["not audited: data plane"]);
    await ops.getQueue("{audited}");
    await ops.deleteQueue("{audited}", { purge: true });
    const job = await ops.createJob({ name: "audited job", target: "HelloWorld", schedule: "0 0 3 * * *" });
    await editor.updateJob({ id: job.id, remark: "edited" }, ["remark"]);
    await editor.setJobStatus(job.id, JobStatus.RUNNING);
    await ops.pauseJob(job.id);
    await ops.resumeJob(job.id);
    const runId = await ops.runOnce(job.id);
    await viewer.getJob(job.id);
    expect(await failed(viewer.createJob({ name: "not allowed", target: "HelloWorld", schedule: "0 0 3 * * *" }))).toBe(grpc.status.PERMISSION_DENIED);
    expect(await failed(ops.deleteJob("999999"))).toBe(grpc.status.NOT_FOUND);
    const unauthenticated = new SwitchyardClient(sy.address);
    expect(await failed(unauthenticated.deleteJob(job.id))).toBe(grpc.status.UNAUTHENTICATED);
    unauthenticated.close();
    const other = await ops.createJob({ name: "second", target: "HelloWorld", schedule: "0 0 3 * * *" });
    await ops.deleteJob(job.id);
    await ops.batchDeleteJobs([other.id]);

    const entries = (await allEntries()).slice(0, -before || undefined);
    const seen = entries.map((e) => ({ actor: e.actor, method: e.method.replace("switchyard.v1.", ""), target: e.target, detail: e.detail, code: e.code }));
    expect(seen.reverse()).toEqual([
      { actor: "ops", method: "QueueService/CreateQueue", target: "{audited}", detail: "", code: 0 },
      { actor: "ops", method: "QueueService/DeleteQueue", target: "{audited}", detail: "purge", code: 0 },
      { actor: "ops", method: "CronService/CreateJob", target: job.id, detail: "name=audited job", code: 0 },
      { actor: "editor", method: "CronService/UpdateJob", target: job.id, detail: "fields=remark", code: 0 },
      { actor: "editor", method: "CronService/SetJobStatus", target: job.id, detail: "status=RUNNING", code: 0 },
      { actor: "ops", method: "CronService/PauseJob", target: job.id, detail: "", code: 0 },
      { actor: "ops", method: "CronService/ResumeJob", target: job.id, detail: "", code: 0 },
      { actor: "ops", method: "CronService/RunOnce", target: job.id, detail: `run=${runId}`, code: 0 },
      { actor: "viewer", method: "CronService/CreateJob", target: "", detail: "name=not allowed", code: grpc.status.PERMISSION_DENIED },
      { actor: "ops", method: "CronService/DeleteJob", target: "999999", detail: "", code: grpc.status.NOT_FOUND },
      { actor: "ops", method: "CronService/CreateJob", target: other.id, detail: "name=second", code: 0 },
      { actor: "ops", method: "CronService/DeleteJob", target: job.id, detail: "", code: 0 },
      { actor: "ops", method: "CronService/BatchDeleteJobs", target: other.id, detail: "", code: 0 },
    ]);
    const denied = entries.find((e) => e.code === grpc.status.PERMISSION_DENIED)!;
    expect(denied.message).toContain("sys:job:add");
    expect(entries.find((e) => e.code === grpc.status.NOT_FOUND)!.message).toContain("job 999999 does not exist");
    for (const e of entries) {
      expect(timestampMs(e.time!)).toBe(start);
      expect(e.peer).toMatch(/127\.0\.0\.1/);
      expect(e.instanceId).toBe(sy.app.scheduler.instanceId);
      if (e.code === 0) expect(e.message).toBe("");
    }
  });

  it("pages newest first without gaps or repeats", async () => {
    const one = await allEntries(1);
    const big = (await clients.auditor.listAuditLogs(1000)).logs;
    expect(one.map((e) => e.id)).toEqual(big.map((e) => e.id));
    const ids = big.map((e) => Number(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => b - a));
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("is read only with sys:audit:list", async () => {
    const err = await clients.viewer.listAuditLogs().catch((e: grpc.ServiceError) => e);
    expect(err).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    expect((err as grpc.ServiceError).details).toContain("sys:audit:list");
  });

  it("names the caller as a job's create and update actor", async () => {
    const job = await clients.ops.createJob({ name: "actors", target: "HelloWorld", schedule: "0 0 3 * * *" });
    expect([job.createActor, job.updateActor]).toEqual(["ops", "ops"]);
    const updated = await clients.editor.updateJob({ id: job.id, remark: "by editor" }, ["remark"]);
    expect([updated.createActor, updated.updateActor]).toEqual(["ops", "editor"]);
    const paused = await clients.editor.setJobStatus(job.id, JobStatus.RUNNING);
    expect(paused.updateActor).toBe("editor");
  });
});

describe("LogClean", () => {
  it("removes audit entries older than the retention and reports how many", async () => {
    const now = sy.clock.now();
    const connection = await connectRedis(redis.target, createLogger("silent"));
    try {
      const store = new AuditLogStore(connection, systemKeys("switchyard"));
      const old = { actor: "history", method: "switchyard.v1.CronService/DeleteJob", target: "1", detail: "", code: 0, message: "", peer: "", instanceId: "" };
      for (let i = 0; i < 3; i++) await store.append({ ...old, timeMs: now - 40 * DAY });
      await store.append({ ...old, timeMs: now - 10 * DAY });
    } finally {
      await connection.close();
    }
    const recentBefore = (await allEntries(1000)).filter((e) => timestampMs(e.time!) > now - 30 * DAY).length;

    const clean = await clients.ops.createJob({ name: "clean", target: "LogClean", params: '{"retentionDays": 30}', schedule: "0 0 4 * * *" });
    const runId = await clients.ops.runOnce(clean.id);
    await expect.poll(async () => (await clients.ops.listJobLogs(clean.id)).logs.map((l) => l.id), { timeout: 10_000 }).toContain(runId);
    const [entry] = (await clients.ops.listJobLogs(clean.id)).logs;
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toContain("audit log: 3");

    const left = await allEntries(1000);
    expect(left.filter((e) => timestampMs(e.time!) <= now - 30 * DAY)).toEqual([]);
    // The 10-day-old entry, everything recent, and the CreateJob and RunOnce just made.
    expect(left.filter((e) => timestampMs(e.time!) > now - 30 * DAY)).toHaveLength(recentBefore + 2);
  });
});
