/**
 * SPEC S6, issue 6 "What it must show" 1: every RPC of QueueService,
 * CronService and AuditService, called with no token, an unknown token, a
 * token without the scope, and a token whose scope covers another queue, gets
 * the right status; with the right scope it succeeds. Real gRPC, real Redis.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QUEUE_SCOPES, SYSTEM_SCOPES, type ScopeName } from "../../src/auth/scopes.js";
import { accessRules } from "../../src/grpc/access.js";
import { clientConstructor } from "../../src/grpc/adapter.js";
import { EnqueueRequestSchema, QueueMode, QueueService } from "../../src/gen/switchyard/v1/queue_pb.js";
import { CronService, JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { AuditService } from "../../src/gen/switchyard/v1/audit_pb.js";
import { AuthService } from "../../src/gen/switchyard/v1/auth_pb.js";
import { Health, HealthCheckRequestSchema, type HealthCheckResponse } from "../../src/gen/grpc/health/v1/health_pb.js";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../src/gen/grpc/reflection/v1/reflection_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const Q = "{thumbnails}";
const QUEUE = { name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: { seconds: 60n } };
/** A STREAM queue for the consumer-group calls. */
const STREAM = `${Q}.uploads`;
let groups = 0;
/** A pattern that covers other queues, never {thumbnails}. */
const OTHER = "cache.*";
const ALL_SCOPES: ScopeName[] = [...SYSTEM_SCOPES, ...QUEUE_SCOPES];

/** One RPC: the scope it needs (null: any authenticated caller) and a call of it through a client. */
interface Row {
  method: string;
  scope: ScopeName | null;
  /** The narrowest scope that lets the call succeed. */
  grant?: string;
  /** Runs the call as `c`; any setup it needs is done as admin. */
  run(c: SwitchyardClient): Promise<unknown>;
}

let redis: TestRedis;
let sy: TestSwitchyard;
let admin: SwitchyardClient;
let baseJobId: string;
const tokens = new Map<string, string>(); // token name → token
const clients: SwitchyardClient[] = [];

/** A client that sends `token` (none when undefined). */
function clientWith(token: string | undefined): SwitchyardClient {
  const c = new SwitchyardClient(sy.address, { token });
  clients.push(c);
  return c;
}
const as = (name: string) => clientWith(tokens.get(name)!);

const newJob = (name: string) => admin.createJob({ name, target: "HelloWorld", schedule: "0 0 3 * * *" });

/** A delivery held by an admin stream, and a way to give it back. */
async function held(): Promise<{ token: string; close: () => Promise<unknown> }> {
  await admin.enqueue(Q, ["work"]);
  const session = admin.lease(Q, 1);
  const [d] = await session.take(1);
  return { token: d.leaseToken, close: () => session.close() };
}

async function withHeld<T>(fn: (token: string) => Promise<T>): Promise<T> {
  const h = await held();
  try {
    return await fn(h.token);
  } finally {
    await h.close();
  }
}

/** The unary Enqueue RPC, through `c`'s channel and token. */
function unaryEnqueue(c: SwitchyardClient, queue: string): Promise<unknown> {
  const request = create(EnqueueRequestSchema, { queue, items: [{ payload: Buffer.from("m") }] });
  const rpc = c.grpc as unknown as { enqueue(r: unknown, cb: (err: grpc.ServiceError | null, res: unknown) => void): void };
  return new Promise((ok, fail) => rpc.enqueue(request, (err, res) => (err ? fail(err) : ok(res))));
}

const rows: Row[] = [
  { method: "QueueService/CreateQueue", scope: "queue:admin", grant: `queue:admin:${Q}*`, run: (c) => c.createQueue(QUEUE) },
  { method: "QueueService/GetQueue", scope: "queue:read", grant: `queue:read:${Q}`, run: (c) => c.getQueue(Q) },
  {
    method: "QueueService/UpdateQueue",
    scope: "queue:admin",
    grant: `queue:admin:${Q}`,
    run: (c) => c.updateQueue({ name: Q, maxDeliveries: 7 }, ["max_deliveries"]),
  },
  {
    method: "QueueService/PauseQueue",
    scope: "queue:admin",
    grant: `queue:admin:${Q}`,
    run: async (c) => {
      await c.pauseQueue(Q);
      return admin.resumeQueue(Q);
    },
  },
  { method: "QueueService/ResumeQueue", scope: "queue:admin", grant: `queue:admin:${Q}`, run: (c) => c.resumeQueue(Q) },
  { method: "QueueService/ListQueues", scope: "queue:read", grant: "queue:read", run: (c) => c.listQueues() },
  {
    method: "QueueService/DeleteQueue",
    scope: "queue:admin",
    grant: `queue:admin:${Q}*`,
    run: async (c) => {
      await admin.createQueue({ name: `${Q}.tmp`, mode: QueueMode.SIMPLE });
      return c.deleteQueue(`${Q}.tmp`);
    },
  },
  { method: "QueueService/GetQueueStats", scope: "queue:read", grant: `queue:read:${Q}`, run: (c) => c.getQueueStats(Q) },
  { method: "QueueService/PeekQueue", scope: "queue:read", grant: `queue:read:${Q}`, run: (c) => c.peekQueue(Q) },
  { method: "QueueService/PurgeQueue", scope: "queue:admin", grant: `queue:admin:${Q}`, run: (c) => c.purgeQueue(Q) },
  { method: "QueueService/RequeueDeadLetters", scope: "queue:admin", grant: `queue:admin:${Q}`, run: (c) => c.requeueDeadLetters(Q, "all") },
  { method: "QueueService/DeleteDeadLetters", scope: "queue:admin", grant: `queue:admin:${Q}`, run: (c) => c.deleteDeadLetters(Q, "all") },
  { method: "QueueService/CreateConsumerGroup", scope: "queue:admin", grant: `queue:admin:${STREAM}`, run: (c) => c.createConsumerGroup(STREAM, `g${groups++}`) },
  { method: "QueueService/SetConsumerGroupPosition", scope: "queue:admin", grant: `queue:admin:${STREAM}`, run: (c) => c.setConsumerGroupPosition(STREAM, "g", "0") },
  {
    method: "QueueService/DeleteConsumerGroup",
    scope: "queue:admin",
    grant: `queue:admin:${STREAM}`,
    run: async (c) => {
      const group = `g${groups++}`;
      await admin.createConsumerGroup(STREAM, group);
      return c.deleteConsumerGroup(STREAM, group);
    },
  },
  { method: "QueueService/Enqueue", scope: "queue:enqueue", grant: `queue:enqueue:${Q}`, run: (c) => unaryEnqueue(c, Q) },
  // The client's enqueue() goes by EnqueueStream: a refused request fails alone, with the same status.
  { method: "QueueService/EnqueueStream", scope: "queue:enqueue", grant: `queue:enqueue:${Q}`, run: (c) => c.enqueue(Q, ["m"]) },
  {
    method: "QueueService/Lease",
    scope: "queue:lease",
    grant: `queue:lease:${Q}`,
    run: async (c) => {
      const session = c.lease(Q, 1);
      try {
        return await session.opened;
      } finally {
        await session.close();
      }
    },
  },
  { method: "QueueService/Ack", scope: "queue:lease", grant: `queue:lease:${Q}`, run: (c) => withHeld((t) => c.ack(t)) },
  { method: "QueueService/Retry", scope: "queue:lease", grant: `queue:lease:${Q}`, run: (c) => withHeld((t) => c.retry(t)) },
  { method: "QueueService/Drop", scope: "queue:lease", grant: `queue:lease:${Q}`, run: (c) => withHeld((t) => c.drop(t)) },
  { method: "QueueService/ExtendLease", scope: "queue:lease", grant: `queue:lease:${Q}`, run: (c) => withHeld((t) => c.extendLease(t)) },

  { method: "CronService/CreateJob", scope: "sys:job:add", run: (c) => c.createJob({ name: "made", target: "HelloWorld", schedule: "0 0 3 * * *" }) },
  { method: "CronService/GetJob", scope: "sys:job:list", run: (c) => c.getJob(baseJobId) },
  { method: "CronService/ListJobs", scope: "sys:job:list", run: (c) => c.listJobs() },
  { method: "CronService/ListJobLogs", scope: "sys:job:list", run: (c) => c.listJobLogs(baseJobId) },
  { method: "CronService/UpdateJob", scope: "sys:job:update", run: (c) => c.updateJob({ id: baseJobId, remark: "changed" }, ["remark"]) },
  {
    method: "CronService/SetJobStatus",
    scope: "sys:job:update",
    run: async (c) => c.setJobStatus((await newJob("to run")).id, JobStatus.RUNNING),
  },
  { method: "CronService/DeleteJob", scope: "sys:job:delete", run: async (c) => c.deleteJob((await newJob("to delete")).id) },
  {
    method: "CronService/BatchDeleteJobs",
    scope: "sys:job:delete",
    run: async (c) => c.batchDeleteJobs([(await newJob("batch a")).id, (await newJob("batch b")).id]),
  },
  {
    method: "CronService/PauseJob",
    scope: "sys:job:pause",
    run: async (c) => {
      const job = await newJob("to pause");
      await admin.resumeJob(job.id);
      return c.pauseJob(job.id);
    },
  },
  { method: "CronService/ResumeJob", scope: "sys:job:resume", run: async (c) => c.resumeJob((await newJob("to resume")).id) },
  { method: "CronService/RunOnce", scope: "sys:job:execute", run: (c) => c.runOnce(baseJobId) },
  { method: "CronService/GetSchedulerStatus", scope: null, run: (c) => c.getSchedulerStatus() },
  { method: "CronService/PreviewSchedule", scope: null, run: (c) => c.previewSchedule("0 */5 * * * *") },
  { method: "AuthService/GetCaller", scope: null, run: (c) => c.getCaller() },

  { method: "AuditService/ListAuditLogs", scope: "sys:audit:list", run: (c) => c.listAuditLogs() },
];

const isQueueScope = (scope: string | null) => scope !== null && (QUEUE_SCOPES as readonly string[]).includes(scope);

/** Every token the matrix uses: admin, none, one per grant, one per "every scope but S", one per "S for other queues". */
function tokenTable(): { name: string; scopes: string[] }[] {
  const table = [
    { name: "admin", scopes: ["*"] },
    { name: "no-scopes", scopes: [] as string[] },
  ];
  for (const grant of new Set(rows.map((r) => r.grant ?? r.scope).filter((g): g is string => g !== null))) {
    table.push({ name: `only ${grant}`, scopes: [grant] });
  }
  for (const scope of ALL_SCOPES) {
    // queue:admin includes queue:read: "all but queue:read" lacks both.
    table.push({ name: `all but ${scope}`, scopes: ALL_SCOPES.filter((s) => s !== scope && !(scope === "queue:read" && s === "queue:admin")) });
    if (isQueueScope(scope)) table.push({ name: `${scope} for ${OTHER}`, scopes: [`${scope}:${OTHER}`] });
  }
  table.push({ name: "thumbnails worker", scopes: [`queue:lease:${Q}`] });
  table.push({ name: "thumbnails worker with replies", scopes: [`queue:lease:${Q}`, `queue:enqueue:${Q}.replies`] });
  table.push({ name: "cache producer", scopes: [`queue:enqueue:${OTHER}`] });
  // A worker of {routed}, whose declaration routes replies to {thumbnails}.replies.
  table.push({ name: "routed worker", scopes: ["queue:lease:{routed}", "queue:enqueue:{routed}*"] });
  table.push({ name: "routed worker with replies", scopes: ["queue:lease:{routed}", `queue:enqueue:${Q}.replies`] });
  return table;
}

beforeAll(async () => {
  const table = tokenTable();
  for (const t of table) tokens.set(t.name, randomBytes(24).toString("base64url"));
  const config = table.map((t) => ({ name: t.name, sha256: tokenHash(tokens.get(t.name)!), scopes: t.scopes }));
  redis = await startRedis();
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: JSON.stringify(config) } });
  admin = as("admin");
  await admin.createQueue(QUEUE);
  await admin.createQueue({ name: `${Q}.replies`, mode: QueueMode.RELIABLE });
  await admin.createQueue({ name: "cache.warmups", mode: QueueMode.SIMPLE });
  await admin.createQueue({ name: STREAM, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
  baseJobId = (await newJob("base")).id;
});
afterAll(async () => {
  for (const c of clients) c.close();
  await sy?.stop();
  await redis?.stop();
});

/** The status a call ended with: code 0 when it succeeded. */
async function outcome(call: Promise<unknown>): Promise<{ code: number; details: string }> {
  try {
    await call;
    return { code: grpc.status.OK, details: "" };
  } catch (err) {
    const e = err as grpc.ServiceError;
    if (typeof e.code !== "number") throw err;
    return { code: e.code, details: e.details };
  }
}

describe("the access table", () => {
  it("has a rule for every method of every Switchyard service, and the matrix a row for each", () => {
    const methods = [QueueService, CronService, AuditService, AuthService].flatMap((s) => s.methods.map((m) => `${s.typeName.split(".").pop()}/${m.name}`));
    expect(Object.keys(accessRules).map((p) => p.replace("/switchyard.v1.", "")).sort()).toEqual([...methods].sort());
    expect(rows.map((r) => r.method).sort()).toEqual([...methods].sort());
  });
});

for (const row of rows) {
  describe(row.method, () => {
    it("without a token is UNAUTHENTICATED", async () => {
      const r = await outcome(row.run(clientWith(undefined)));
      expect(r.code, r.details).toBe(grpc.status.UNAUTHENTICATED);
      expect(r.details).toContain("authorization");
    });

    it("with an unknown token is UNAUTHENTICATED, and the token is not echoed", async () => {
      const wrong = randomBytes(24).toString("base64url");
      const r = await outcome(row.run(clientWith(wrong)));
      expect(r).toEqual({ code: grpc.status.UNAUTHENTICATED, details: "unknown bearer token" });
    });

    if (row.scope === null) {
      it("with a token that has no scopes at all succeeds (any authenticated caller)", async () => {
        expect(await outcome(row.run(as("no-scopes")))).toEqual({ code: grpc.status.OK, details: "" });
      });
      return;
    }
    const scope = row.scope;

    it(`with a token holding every scope but ${scope} is PERMISSION_DENIED naming ${scope}`, async () => {
      const r = await outcome(row.run(as(`all but ${scope}`)));
      expect(r.code, r.details).toBe(grpc.status.PERMISSION_DENIED);
      expect(r.details).toContain(scope);
      expect(r.details).toContain(`all but ${scope}`);
    });

    if (isQueueScope(scope)) {
      it(`with ${scope} only for other queues (${OTHER}) is PERMISSION_DENIED naming the scope`, async () => {
        const r = await outcome(row.run(as(`${scope} for ${OTHER}`)));
        expect(r.code, r.details).toBe(grpc.status.PERMISSION_DENIED);
        expect(r.details).toContain(scope);
      });
    }

    it(`with ${row.grant ?? scope} succeeds`, async () => {
      expect(await outcome(row.run(as(`only ${row.grant ?? scope}`)))).toEqual({ code: grpc.status.OK, details: "" });
    });
  });
}

describe("queue patterns", () => {
  it("a worker token for {thumbnails} cannot lease cache.warmups", async () => {
    const session = as("thumbnails worker").lease("cache.warmups", 1);
    const r = await outcome(session.opened);
    expect(r.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r.details).toBe(
      'Lease on queue "cache.warmups" needs scope queue:lease:cache.warmups (or a pattern that matches "cache.warmups"); caller "thumbnails worker" does not have it',
    );
    expect(await session.ended).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
  });

  it("a glob covers the queues it matches and no others", async () => {
    const producer = as("cache producer");
    expect(await producer.enqueue("cache.warmups", ["page"])).toHaveLength(1);
    expect((await outcome(producer.enqueue(Q, ["x"]))).code).toBe(grpc.status.PERMISSION_DENIED);
  });

  it("ListQueues needs queue:read for every queue: a pattern is not enough", async () => {
    const r = await outcome(as(`only queue:admin:${Q}*`).listQueues());
    expect(r.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(r.details).toContain("queue:read for every queue");
  });

  it("queue:admin includes queue:read for the same queues, and queue:read allows no change", async () => {
    expect(await outcome(as(`only queue:admin:${Q}`).getQueueStats(Q))).toEqual({ code: grpc.status.OK, details: "" });
    expect(await outcome(as(`only queue:admin:${Q}`).peekQueue(Q))).toEqual({ code: grpc.status.OK, details: "" });
    const reader = as(`only queue:read:${Q}`);
    const writes = [() => reader.purgeQueue(Q), () => reader.requeueDeadLetters(Q, "all"), () => reader.deleteQueue(Q), () => reader.enqueue(Q, ["x"])];
    for (const call of writes) {
      const r = await outcome(call());
      expect(r.code, r.details).toBe(grpc.status.PERMISSION_DENIED);
    }
  });

  it("GetCaller names the caller and its scopes as configured", async () => {
    expect(await as("thumbnails worker with replies").getCaller()).toMatchObject({
      name: "thumbnails worker with replies",
      scopes: [`queue:lease:${Q}`, `queue:enqueue:${Q}.replies`],
      authEnabled: true,
    });
  });

  it("an ack with replies also needs enqueue on the reply queue", async () => {
    const reply = { queue: `${Q}.replies`, items: ["thumbnail ready"] };
    const denied = await withHeld((t) => outcome(as("thumbnails worker").ack(t, reply)));
    expect(denied.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(denied.details).toContain(`queue:enqueue:${Q}.replies`);
    expect(await redis.plain.llen(`${Q}.replies`)).toBe(0);
    const ok = await withHeld((t) => outcome(as("thumbnails worker with replies").ack(t, reply)));
    expect(ok.code, ok.details).toBe(grpc.status.OK);
    expect(await redis.plain.llen(`${Q}.replies`)).toBe(1);
  });

  it("replies on the queue's standing reply route need enqueue on that route too, by Ack and on a Lease stream", async () => {
    const routed = "{routed}";
    const replies = `${Q}.replies`;
    await admin.createQueue({ name: routed, mode: QueueMode.RELIABLE, replyQueue: replies });
    await admin.enqueue(routed, ["a", "b"]); // the first worker's two, given back when its stream closes, are the second's
    const before = await redis.plain.llen(replies);
    for (const [name, allowed] of [["routed worker", false], ["routed worker with replies", true]] as const) {
      const worker = as(name);
      const session = worker.lease(routed, 2);
      const results: { leaseToken: string; code: number; message: string }[] = [];
      session.onSettleResult((r) => results.push(r));
      const [byAck, onStream] = await session.take(2);
      const unary = await outcome(worker.ack(byAck.leaseToken, { items: ["by Ack"] }));
      session.ack(onStream.leaseToken, { items: ["on the stream"] });
      if (allowed) {
        expect(unary, name).toEqual({ code: grpc.status.OK, details: "" });
        await vi.waitFor(async () => expect(await redis.plain.llen(`${routed}.processing`)).toBe(0));
        expect(results).toEqual([]);
      } else {
        expect(unary.code, name).toBe(grpc.status.PERMISSION_DENIED);
        expect(unary.details).toBe(`Ack on queue "${replies}" needs scope queue:enqueue:${replies} (or a pattern that matches "${replies}"); caller "${name}" does not have it`);
        await vi.waitFor(() => expect(results).toHaveLength(1));
        expect(results[0]).toMatchObject({ leaseToken: onStream.leaseToken, code: grpc.status.PERMISSION_DENIED });
        expect(results[0].message).toContain(`queue:enqueue:${replies}`);
        // Neither delivery was settled, nor a reply written: both are still held.
        expect(await redis.plain.llen(`${routed}.processing`)).toBe(2);
        expect(await redis.plain.llen(replies)).toBe(before);
      }
      await session.close();
    }
    expect(await redis.plain.lrange(replies, 0, 1)).toEqual(expect.arrayContaining([expect.stringContaining("by Ack"), expect.stringContaining("on the stream")]));
    expect(await redis.plain.llen(replies)).toBe(before + 2);
  });

  it("on a Lease stream, a settle for another queue's delivery ends the stream with PERMISSION_DENIED and changes nothing there", async () => {
    await admin.createQueue({ name: "{other}", mode: QueueMode.RELIABLE });
    await admin.enqueue("{other}", ["not yours"]);
    const foreign = admin.lease("{other}", 1);
    const [d] = await foreign.take(1);
    const session = as("thumbnails worker").lease(Q, 1);
    await session.opened;
    session.ack(d.leaseToken);
    const ended = await session.ended;
    expect(ended?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(ended?.details).toContain('queue:lease:{other}');
    expect(await redis.plain.llen("{other}.processing")).toBe(1);
    await foreign.close();
    expect(await redis.plain.llen("{other}")).toBe(1);
  });

  it("an ack_batch with one token of another queue among its own is refused whole: the stream ends and none of its acks applies", async () => {
    await admin.createQueue({ name: "{other-batch}", mode: QueueMode.RELIABLE });
    await admin.enqueue("{other-batch}", ["not yours"]);
    const foreign = admin.lease("{other-batch}", 1);
    const [d] = await foreign.take(1);
    await admin.enqueue(Q, ["mine 1", "mine 2"]);
    const waiting = await redis.plain.llen(Q);
    const session = as("thumbnails worker").lease(Q, 2);
    const mine = await session.take(2);
    // Acks made in one turn go out as one ack_batch.
    session.ack(mine[0].leaseToken);
    session.ack(d.leaseToken);
    session.ack(mine[1].leaseToken);
    const ended = await session.ended;
    expect(ended?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(ended?.details).toContain("queue:lease:{other-batch}");
    // The stream's own items were not acked: they went back to the queue when it ended.
    await expect.poll(() => redis.plain.llen(Q)).toBe(waiting);
    expect(await redis.plain.llen("{other-batch}.processing")).toBe(1);
    await foreign.close();
  });
});

describe("open methods", () => {
  it("health checks need no token", async () => {
    const HealthClient = clientConstructor(Health);
    const c = new HealthClient(sy.address, grpc.credentials.createInsecure());
    try {
      const res = await new Promise<HealthCheckResponse>((ok, fail) =>
        (c as unknown as { check: (r: unknown, cb: (e: Error | null, r: HealthCheckResponse) => void) => void }).check(
          create(HealthCheckRequestSchema, {}),
          (e, r) => (e ? fail(e) : ok(r)),
        ),
      );
      expect(res.status).toBe(1); // SERVING
    } finally {
      c.close();
    }
  });

  it("reflection needs no token", async () => {
    const ReflectionClient = clientConstructor(ServerReflection);
    const c = new ReflectionClient(sy.address, grpc.credentials.createInsecure());
    try {
      const names = await new Promise<string[]>((ok, fail) => {
        const stream = (c as unknown as { serverReflectionInfo(): grpc.ClientDuplexStream<ServerReflectionRequest, ServerReflectionResponse> })
          .serverReflectionInfo();
        stream.on("data", (res: ServerReflectionResponse) => {
          const r = res.messageResponse;
          if (r.case === "listServicesResponse") ok(r.value.service.map((s) => s.name));
          stream.end();
        });
        stream.on("error", fail);
        stream.write(create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }));
      });
      expect(names).toContain("switchyard.v1.AuditService");
    } finally {
      c.close();
    }
  });
});
