/**
 * SPEC S2: standard gRPC server reflection and health checking.
 *
 * Reflection is checked the way an operator uses it: `buf curl` with no
 * --schema, so every request and response (including google.protobuf.Duration
 * fields) is built from the descriptors the server sends. Health is checked to
 * follow Redis: NOT_SERVING while it is down, and the process keeps answering.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { startRedis, startStandaloneRedis, type StandaloneRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { clientConstructor } from "../../src/grpc/adapter.js";
import {
  Health,
  HealthCheckRequestSchema,
  type HealthCheckResponse,
  HealthCheckResponse_ServingStatus as ServingStatus,
} from "../../src/gen/grpc/health/v1/health_pb.js";
import { QueueMode, QueueService } from "../../src/gen/switchyard/v1/queue_pb.js";

const BUF = fileURLToPath(new URL("../../node_modules/.bin/buf", import.meta.url));

interface BufResult {
  /** 0 on success; for a failed RPC, the gRPC code shifted left by 3 (buf's convention). */
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs `buf curl` against `address` over plain-text HTTP/2 with the gRPC protocol, schema from reflection. */
function bufCurl(address: string, args: string[]): Promise<BufResult> {
  return new Promise((ok, fail) => {
    execFile(
      BUF,
      ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--timeout", "20s", ...args.map((a) => a.replace("ADDRESS", address))],
      { timeout: 25_000, env: { ...process.env, BUF_CACHE_DIR: process.env.BUF_CACHE_DIR ?? "/tmp/sy-buf-cache" } },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== "number") return fail(err);
        ok({ exitCode: err ? (err.code as number) : 0, stdout, stderr });
      },
    );
  });
}

/** Calls one method through `buf curl` and parses its JSON response; fails with buf's output otherwise. */
async function bufCall(address: string, method: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await bufCurl(address, [`http://ADDRESS/${method}`, "-d", JSON.stringify(body)]);
  expect(r.exitCode, `buf curl ${method}: ${r.stderr}`).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe("server reflection with buf curl", () => {
  let redis: TestRedis;
  let sy: TestSwitchyard;
  beforeAll(async () => {
    redis = await startRedis();
    sy = await startSwitchyard(redis);
  });
  afterAll(async () => {
    await sy?.stop();
    await redis?.stop();
  });

  it("lists every service", async () => {
    const r = await bufCurl(sy.address, ["--list-services", "http://ADDRESS"]);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout.trim().split("\n")).toEqual(
      expect.arrayContaining([
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "switchyard.v1.QueueService",
      ]),
    );
  });

  it("lists every QueueService method (--list-methods resolves every listed service)", async () => {
    const r = await bufCurl(sy.address, ["--list-methods", "http://ADDRESS"]);
    expect(r.exitCode, r.stderr).toBe(0);
    const methods = r.stdout.trim().split("\n");
    const queueMethods = methods.filter((m) => m.startsWith("switchyard.v1.QueueService/")).map((m) => m.split("/")[1]);
    expect(queueMethods.sort()).toEqual(
      [
        "CreateQueue", "GetQueue", "UpdateQueue", "PauseQueue", "ResumeQueue", "ListQueues", "DeleteQueue", "GetQueueStats", "PeekQueue",
        "PurgeQueue", "RequeueDeadLetters", "DeleteDeadLetters",
        "CreateConsumerGroup", "SetConsumerGroupPosition", "DeleteConsumerGroup",
        "Enqueue", "EnqueueStream", "Lease", "Ack", "Retry", "Drop", "ExtendLease",
      ].sort(),
    );
    // The proto and the served methods agree.
    expect(queueMethods.sort()).toEqual(QueueService.methods.map((m) => m.name).sort());
    expect(methods).toContain("grpc.health.v1.Health/Check");
    expect(methods).toContain("grpc.health.v1.Health/Watch");
    expect(methods).toContain("grpc.reflection.v1.ServerReflection/ServerReflectionInfo");
    expect(methods).toContain("grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo");
  });

  it("describes the v1alpha reflection service in its own package, and serves it", async () => {
    const r = await bufCall(sy.address, "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", {
      fileContainingSymbol: "grpc.reflection.v1alpha.ServerReflection",
    });
    const encoded = (r.fileDescriptorResponse as { fileDescriptorProto: string[] }).fileDescriptorProto;
    const files = encoded.map((b64) => fromBinary(FileDescriptorProtoSchema, Buffer.from(b64, "base64")));
    expect(files.map((f) => f.name)).toEqual(["grpc/reflection/v1alpha/reflection.proto"]);
    expect(files[0].package).toBe("grpc.reflection.v1alpha");
    const method = files[0].service[0].method[0];
    expect([method.name, method.inputType, method.outputType]).toEqual([
      "ServerReflectionInfo",
      ".grpc.reflection.v1alpha.ServerReflectionRequest",
      ".grpc.reflection.v1alpha.ServerReflectionResponse",
    ]);
    // An unknown symbol is an error response, not a broken stream.
    const missing = await bufCall(sy.address, "grpc.reflection.v1.ServerReflection/ServerReflectionInfo", {
      fileContainingSymbol: "no.such.Symbol",
    });
    expect(missing.errorResponse).toEqual({ errorCode: grpc.status.NOT_FOUND, errorMessage: "symbol no.such.Symbol not found" });
  });

  it("calls CreateQueue with Duration fields, Enqueue and GetQueueStats with the schema from reflection", async () => {
    const created = await bufCall(sy.address, "switchyard.v1.QueueService/CreateQueue", {
      queue: { name: "{refl}", mode: "QUEUE_MODE_RELIABLE", recoverySet: "{refl}.claims", minIdle: "60s", recoveryTtl: "3600s" },
    });
    expect(created.queue).toMatchObject({
      name: "{refl}",
      mode: "QUEUE_MODE_RELIABLE",
      processingList: "{refl}.processing",
      recoverySet: "{refl}.claims",
      minIdle: "60s",
      recoveryTtl: "3600s",
      maxDeliveries: 25,
      deadLetterList: "{refl}.dead",
    });
    // What buf sent is what was stored.
    const stored = JSON.parse((await redis.plain.hget("{switchyard}:queues", "{refl}"))!) as Record<string, unknown>;
    expect(stored).toMatchObject({ name: "{refl}", mode: "reliable", minIdleMs: 60_000, recoveryTtlMs: 3_600_000 });

    const enqueued = await bufCall(sy.address, "switchyard.v1.QueueService/Enqueue", {
      queue: "{refl}",
      items: [{ payload: Buffer.from("via buf").toString("base64"), headers: { traceparent: "00-abc" } }, { payload: "" }],
      ttl: "90s",
    });
    expect(enqueued.ids).toHaveLength(2);
    expect(await redis.plain.llen("{refl}")).toBe(2);
    const pttl = await redis.plain.pttl("{refl}");
    expect(pttl).toBeGreaterThan(80_000);
    expect(pttl).toBeLessThanOrEqual(90_000);

    const stats = await bufCall(sy.address, "switchyard.v1.QueueService/GetQueueStats", { name: "{refl}" });
    expect(stats).toEqual({ stats: { queue: "{refl}", ready: "2" } });

    // The item buf enqueued is delivered with its payload and headers.
    const session = sy.client.lease("{refl}", 1);
    const [d] = await session.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("via buf");
    expect(d.headers).toEqual({ traceparent: "00-abc" });
    expect((enqueued.ids as string[])[0]).toBe(d.id);
    await sy.client.ack(d.leaseToken);
    await session.close();
  });

  it("reports domain errors with their gRPC code through buf curl", async () => {
    const r = await bufCurl(sy.address, ["http://ADDRESS/switchyard.v1.QueueService/GetQueue", "-d", '{"name":"{nope}"}']);
    expect(r.exitCode).toBe(grpc.status.NOT_FOUND << 3);
    expect(r.stderr).toContain("not_found");
    expect(r.stderr).toContain("{nope}");
  });

  it("answers grpc.health.v1.Health/Check with SERVING, for the server and for QueueService, over both reflection versions", async () => {
    expect(await bufCall(sy.address, "grpc.health.v1.Health/Check", {})).toEqual({ status: "SERVING" });
    expect(await bufCall(sy.address, "grpc.health.v1.Health/Check", { service: "switchyard.v1.QueueService" })).toEqual({
      status: "SERVING",
    });
    const alpha = await bufCurl(sy.address, [
      "--reflect-protocol",
      "grpc-v1alpha",
      "http://ADDRESS/grpc.health.v1.Health/Check",
      "-d",
      "{}",
    ]);
    expect(alpha.exitCode, alpha.stderr).toBe(0);
    expect(JSON.parse(alpha.stdout)).toEqual({ status: "SERVING" });
    const unknown = await bufCurl(sy.address, ["http://ADDRESS/grpc.health.v1.Health/Check", "-d", '{"service":"no.such.Service"}']);
    expect(unknown.exitCode).toBe(grpc.status.NOT_FOUND << 3);
  });
});

type HealthClient = grpc.Client & {
  check(req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: HealthCheckResponse) => void): void;
  watch(req: unknown): grpc.ClientReadableStream<HealthCheckResponse>;
};

describe("health follows Redis", () => {
  let redis: StandaloneRedis;
  let sy: TestSwitchyard;
  let health: HealthClient;
  let restarted: EmbeddedRedis | undefined;
  beforeAll(async () => {
    redis = await startStandaloneRedis(); // killed and restarted below
    sy = await startSwitchyard(redis);
    const Ctor = clientConstructor(Health);
    health = new Ctor(sy.address, grpc.credentials.createInsecure()) as unknown as HealthClient;
  });
  afterAll(async () => {
    health?.close();
    await sy?.stop();
    await restarted?.stop();
    await redis?.stop();
  });

  function check(service = ""): Promise<ServingStatus> {
    return new Promise((ok, fail) =>
      health.check(create(HealthCheckRequestSchema, { service }), new grpc.Metadata(), { deadline: Date.now() + 5000 }, (err, res) =>
        err ? fail(err) : ok(res!.status),
      ),
    );
  }

  async function eventuallyStatus(want: ServingStatus): Promise<void> {
    const deadline = Date.now() + 10_000;
    let last: ServingStatus | undefined;
    while ((last = await check()) !== want) {
      if (Date.now() > deadline) throw new Error(`health stayed ${ServingStatus[last]}, expected ${ServingStatus[want]}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it("reports NOT_SERVING once Redis is gone, answers UNAVAILABLE instead of INTERNAL, and keeps running", { timeout: 60_000 }, async () => {
    await sy.client.createQueue({ name: "{h}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{h}", ["before"]);
    // An open lease stream whose pump will lose its connections too.
    const session = sy.client.lease("{h}", 1);
    await session.opened;
    const [d] = await session.take(1);
    expect(await check()).toBe(ServingStatus.SERVING);

    const watched: ServingStatus[] = [];
    const watch = health.watch(create(HealthCheckRequestSchema, { service: "switchyard.v1.QueueService" }));
    watch.on("data", (r: HealthCheckResponse) => watched.push(r.status));
    watch.on("error", () => undefined);
    // The watch has its first status (SERVING) before Redis goes, so it sees the change.
    await expect.poll(() => watched.length).toBe(1);

    // The test's own checking client reconnects on its own; it need not report the outage.
    redis.plain.on("error", () => undefined);
    await redis.server.kill();
    await eventuallyStatus(ServingStatus.NOT_SERVING);
    expect(await check("switchyard.v1.QueueService")).toBe(ServingStatus.NOT_SERVING);

    // Calls that need Redis fail with UNAVAILABLE (retryable), not INTERNAL.
    const codeOf = (p: Promise<unknown>) => p.then(() => grpc.status.OK, (e: grpc.ServiceError) => e.code);
    expect(await codeOf(sy.client.enqueue("{h}", ["while down"]))).toBe(grpc.status.UNAVAILABLE);
    expect(await codeOf(sy.client.getQueueStats("{h}"))).toBe(grpc.status.UNAVAILABLE);
    expect(await codeOf(sy.client.ack(d.leaseToken))).toBe(grpc.status.UNAVAILABLE);
    expect(await codeOf(sy.client.createQueue({ name: "{h2}", mode: QueueMode.RELIABLE }))).toBe(grpc.status.UNAVAILABLE);
    const err = await sy.client.enqueue("{h}", ["x"]).catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).details).toContain("redis is unavailable");

    // The in-process server is alive: health and reflection still answer.
    expect(await check()).toBe(ServingStatus.NOT_SERVING);
    expect(await bufCall(sy.address, "grpc.health.v1.Health/Check", {})).toEqual({ status: "NOT_SERVING" });
    const deadline = Date.now() + 5000;
    while (!watched.includes(ServingStatus.NOT_SERVING) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(watched[0]).toBe(ServingStatus.SERVING);
    expect(watched).toContain(ServingStatus.NOT_SERVING);

    // Redis comes back on the same socket: SERVING again, and the held item can still be acked.
    restarted = await startEmbeddedRedis({ dir: redis.server.dir, appendOnly: false });
    await eventuallyStatus(ServingStatus.SERVING);
    expect(watched[watched.length - 1]).toBe(ServingStatus.SERVING);
    watch.cancel();
    // The test Redis keeps no data across the crash: the instance reloads its declarations on reconnecting
    // and no longer takes items for the lost queue, until it is declared again.
    await expect.poll(() => codeOf(sy.client.enqueue("{h}", ["lost queue"]))).toBe(grpc.status.NOT_FOUND);
    await sy.client.createQueue({ name: "{h}", mode: QueueMode.RELIABLE });
    expect(await sy.client.enqueue("{h}", ["after"])).toHaveLength(1);
    // The stream still holds its credit of 1, so the new item waits in the queue.
    expect(await redis.plain.llen("{h}")).toBe(1);
    session.cancel();
  });
});
