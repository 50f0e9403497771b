/**
 * Per-call observability over real gRPC: a request id in every log line of a
 * call (the caller's x-request-id, or a new one, echoed back), no secrets or
 * payloads in the logs, and a traceparent sent with Enqueue reaching the
 * worker's delivery.
 */
import * as grpc from "@grpc/grpc-js";
import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { EnqueueRequestSchema, GetQueueRequestSchema, LeaseRequestSchema, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;
let lines: Record<string, unknown>[] = [];
let raw: string[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const log = createLogger("debug", (line) => {
    raw.push(line);
    lines.push(JSON.parse(line) as Record<string, unknown>);
  });
  sy = await startSwitchyard(redis, { log });
  await sy.client.createQueue({ name: "{obs}", mode: QueueMode.RELIABLE });
});
beforeEach(() => {
  lines = [];
  raw = [];
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

interface Answer {
  err: grpc.ServiceError | null;
  headers?: grpc.Metadata;
  trailers?: grpc.Metadata;
}

/** A unary call with our own metadata through the client's grpc-js channel. */
function call<T extends DescMessage>(method: string, schema: T, request: MessageInitShape<T>, metadata: Record<string, string>): Promise<Answer> {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  const fn = (sy.client.grpc as unknown as Record<string, (...a: unknown[]) => grpc.ClientUnaryCall>)[method].bind(sy.client.grpc);
  return new Promise((ok) => {
    const answer: Answer = { err: null };
    const c = fn(create(schema, request), md, { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null) => {
      answer.err = err;
    });
    c.on("metadata", (m: grpc.Metadata) => (answer.headers = m));
    c.on("status", (s: grpc.StatusObject) => {
      answer.trailers = s.metadata;
      setImmediate(() => ok(answer));
    });
  });
}

const ofRequest = (id: string) => lines.filter((l) => l.requestId === id);

describe("request ids", () => {
  it("puts the caller's x-request-id in the call's log lines and echoes it back", async () => {
    const ok = await call("enqueue", EnqueueRequestSchema, { queue: "{obs}", items: [{ payload: new TextEncoder().encode("p") }] }, { "x-request-id": "req-ok-1" });
    expect(ok.err).toBeNull();
    expect(ok.headers?.get("x-request-id")).toEqual(["req-ok-1"]);
    expect(ofRequest("req-ok-1")).toEqual([
      expect.objectContaining({ level: "debug", msg: "rpc finished", service: "switchyard.v1.QueueService", method: "Enqueue", code: "OK" }),
    ]);

    const failed = await call("getQueue", GetQueueRequestSchema, { name: "nope" }, { "x-request-id": "req-fail-2" });
    expect(failed.err?.code).toBe(grpc.status.NOT_FOUND);
    expect(failed.trailers?.get("x-request-id")).toEqual(["req-fail-2"]); // a trailers-only answer carries it there
    expect(ofRequest("req-fail-2")).toEqual([expect.objectContaining({ level: "info", msg: "rpc failed", method: "GetQueue", code: "NotFound" })]);
  });

  it("makes one up when the caller sends none, or one that is not a short token", async () => {
    const cases: Record<string, string>[] = [{}, { "x-request-id": "has spaces!" }, { "x-request-id": "x".repeat(200) }];
    for (const metadata of cases) {
      lines = [];
      const answer = await call("getQueue", GetQueueRequestSchema, { name: "nope" }, metadata);
      const [id] = answer.trailers!.get("x-request-id") as string[];
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(ofRequest(id)).toHaveLength(1);
    }
  });

  it("tags a Lease stream's lines too", async () => {
    const md = new grpc.Metadata();
    md.set("x-request-id", "lease-req-3");
    const stream = (sy.client.grpc as unknown as { lease(md: grpc.Metadata): grpc.ClientDuplexStream<unknown, unknown> }).lease(md);
    const ended = new Promise<grpc.ServiceError>((ok) => stream.on("error", ok));
    stream.on("data", () => undefined);
    stream.write(create(LeaseRequestSchema, { kind: { case: "open", value: { queue: "undeclared", credit: 1 } } }));
    expect((await ended).code).toBe(grpc.status.NOT_FOUND);
    expect(ofRequest("lease-req-3")).toEqual([
      expect.objectContaining({ msg: "rpc failed", method: "Lease", code: "NotFound" }),
    ]);
  });
});

describe("what logs never hold", () => {
  it("writes no authorization metadata and no payload, even at debug", async () => {
    const secret = "s3cret-token-value";
    const payload = "payload-that-must-not-be-logged";
    await call("enqueue", EnqueueRequestSchema, { queue: "{obs}", items: [{ payload: new TextEncoder().encode(payload) }] }, {
      authorization: `Bearer ${secret}`,
    });
    await call("enqueue", EnqueueRequestSchema, { queue: "undeclared", items: [{ payload: new TextEncoder().encode(payload) }] }, {
      authorization: `Bearer ${secret}`,
    });
    expect(lines.length).toBeGreaterThanOrEqual(2);
    expect(raw.join("")).not.toContain(secret);
    expect(raw.join("")).not.toContain(payload);
  });
});

describe("trace context", () => {
  const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

  it("a traceparent sent with Enqueue travels in the item's headers to the delivery", async () => {
    const items: { payload: Uint8Array; headers: Record<string, string> }[] = [
      { payload: new TextEncoder().encode("no trace of its own"), headers: { n: "1" } },
      { payload: new TextEncoder().encode("has its own"), headers: { traceparent: own } },
    ];
    await sy.client.createQueue({ name: "{trace}", mode: QueueMode.RELIABLE });
    const answer = await call("enqueue", EnqueueRequestSchema, { queue: "{trace}", items }, { traceparent: parent, tracestate: "vendor=abc" });
    expect(answer.err).toBeNull();
    const lease = sy.client.lease("{trace}", 10);
    const deliveries = await lease.take(2);
    await Promise.all(deliveries.map((d) => sy.client.ack(d.leaseToken)));
    await lease.close();
    expect(deliveries[0].headers).toEqual({ n: "1", traceparent: parent, tracestate: "vendor=abc" });
    expect(deliveries[1].headers).toEqual({ traceparent: own }); // an item's own traceparent wins
  });

  it("ignores a traceparent that is not valid W3C trace context", async () => {
    await sy.client.createQueue({ name: "{trace2}", mode: QueueMode.RELIABLE });
    for (const bad of ["nonsense", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]) {
      await call("enqueue", EnqueueRequestSchema, { queue: "{trace2}", items: [{ payload: new Uint8Array([1]) }] }, { traceparent: bad });
    }
    const lease = sy.client.lease("{trace2}", 3);
    const deliveries = await lease.take(3);
    await Promise.all(deliveries.map((d) => sy.client.ack(d.leaseToken)));
    await lease.close();
    expect(deliveries.map((d) => d.headers)).toEqual([{}, {}, {}]);
  });
});
