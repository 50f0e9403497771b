/**
 * An Enqueue's request bytes are let go once its items are encoded as stored
 * (PackedItems.release): while the call waits for Redis it no longer holds
 * them also as they came. What must hold: the stored items are exactly what was
 * sent (payloads, headers, schedules), nothing reads a payload after the
 * release, a stream queue (whose append reads the payloads while it writes)
 * keeps them, and the pending-bytes budget comes back to zero.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { encodeEnqueueRequest, readEnqueueRequest } from "../../src/grpc/enqueue-wire.js";
import { withTrace } from "../../src/grpc/trace.js";
import { decodeItem } from "../../src/queue/envelope.js";

let redis: TestRedis;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  await sy.client.createQueue({ name: "{rel}", mode: QueueMode.RELIABLE });
  await sy.client.createQueue({ name: "rel.stream", mode: QueueMode.STREAM });
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

const payloads = [Buffer.from("first"), Buffer.alloc(3000, 0xab), Buffer.from([0, 255, 1, 254]), Buffer.alloc(0)];
const request = (queue: string, extra: { idempotencyKey?: string } = {}) =>
  readEnqueueRequest(
    encodeEnqueueRequest({
      queue,
      items: payloads.map((payload, i) => ({ payload, headers: (i === 1 ? { kind: "big", n: String(i) } : {}) as Record<string, string>, ...extra })),
    }),
  );

describe("an Enqueue lets its request bytes go once its items are encoded", () => {
  it("a list queue: the items are released, stored exactly as sent, and the pending budget is back to zero", async () => {
    const call = request("{rel}");
    const ids = await sy.app.queues.enqueue("{rel}", call.items);
    expect(() => call.items.payload(0)).toThrow(/after release/);
    expect(() => call.items.copyPayload(1, Buffer.alloc(3000), 0)).toThrow(/after release/);
    const stored = (await redis.plain.lrangeBuffer("{rel}", 0, -1)).reverse().map((v) => decodeItem(v));
    expect(stored.map((s) => s.id)).toEqual(ids);
    expect(stored.map((s) => Buffer.from(s.payload).toString("hex"))).toEqual(payloads.map((p) => p.toString("hex")));
    expect(stored.map((s) => s.headers)).toEqual([{}, { kind: "big", n: "1" }, {}, {}]);
    expect(sy.app.queues.pendingEnqueueBytes).toBe(0);
    await redis.plain.del("{rel}");
  });

  it("items with idempotency keys (the scheduled path) are released after encoding and stored as sent", async () => {
    const call = request("{rel}", { idempotencyKey: "k" });
    // Four items with one key: the first is added, the others answer with its id.
    const ids = await sy.app.queues.enqueue("{rel}", call.items);
    expect(new Set(ids).size).toBe(1);
    expect(() => call.items.payload(1)).toThrow(/after release/);
    const stored = (await redis.plain.lrangeBuffer("{rel}", 0, -1)).map((v) => decodeItem(v));
    expect(stored.map((s) => [s.id, Buffer.from(s.payload).toString()])).toEqual([[ids[0], "first"]]);
    await redis.plain.del("{rel}");
  });

  it("traced items release the items they wrap", async () => {
    const call = request("{rel}");
    const traced = withTrace(call.items, { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
    await sy.app.queues.enqueue("{rel}", traced);
    expect(() => call.items.payload(0)).toThrow(/after release/);
    const stored = (await redis.plain.lrangeBuffer("{rel}", 0, -1)).reverse().map((v) => decodeItem(v));
    expect(stored.map((s) => Buffer.from(s.payload).toString("hex"))).toEqual(payloads.map((p) => p.toString("hex")));
    expect(stored.every((s) => s.headers.traceparent?.startsWith("00-0af7651916cd43dd"))).toBe(true);
    await redis.plain.del("{rel}");
  });

  it("a request refused before encoding keeps its items (nothing was copied out)", async () => {
    const call = request("no.such.queue");
    await expect(sy.app.queues.enqueue("no.such.queue", call.items)).rejects.toMatchObject({ code: "not_found" });
    expect(Buffer.from(call.items.payload(1)).equals(payloads[1])).toBe(true);
  });

  it("a stream queue keeps its items: the append reads them as it writes", async () => {
    const call = request("rel.stream");
    await sy.app.queues.enqueue("rel.stream", call.items);
    expect(Buffer.from(call.items.payload(1)).equals(payloads[1])).toBe(true);
    const entries = await redis.plain.xrangeBuffer("rel.stream", "-", "+");
    expect(entries.map(([, fields]) => fields[fields.findIndex((f, i) => i % 2 === 0 && f.toString() === "payload") + 1].toString("hex"))).toEqual(
      payloads.map((p) => p.toString("hex")),
    );
  });
});
