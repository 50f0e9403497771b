/**
 * SPEC Q1: any Redis client that LPUSHes bytes onto a queue key is a valid
 * producer. Such raw items carry no envelope: they are delivered with their
 * bytes unchanged, no id and no enqueue time, and settle like any other item.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leaseRecords, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";

let redis: TestRedis;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  await sy.client.createQueue({ name: "{raw}", mode: QueueMode.RELIABLE });
  await sy.client.createQueue({ name: "{raw-claims}", mode: QueueMode.RELIABLE, recoverySet: "{raw-claims}.claims", minIdle: { seconds: 60n } });
  await sy.client.createQueue({ name: "raw.simple", mode: QueueMode.SIMPLE });
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

/** Raw payloads, in the order they are pushed: text, non-UTF-8 bytes, NULs, an empty value, a near-envelope. */
const payloads: Buffer[] = [
  Buffer.from("plain text"),
  Buffer.from([0xff, 0xfe, 0xfd, 0x80, 0xc3, 0x28]), // invalid UTF-8
  Buffer.from([0x00, 0x01, 0x00, 0x3a, 0x00]), // NULs and a ':' (the lease record's separator)
  Buffer.alloc(0),
  Buffer.from("SYE1\xff\xff\xff", "latin1"), // starts like an envelope, but is not one
  Buffer.from("ünïcødé ✓"),
  Buffer.from(Array.from({ length: 256 }, (_, i) => i)), // every byte value
];

/** Pushes each payload with its own LPUSH, as a plain producer would. */
async function pushRaw(queue: string, values: Buffer[]): Promise<void> {
  for (const v of values) await redis.plain.lpush(queue, v);
}

function expectRaw(d: Delivery, payload: Buffer, queue: string): void {
  expect(Buffer.from(d.payload).equals(payload), `payload ${Buffer.from(d.payload).toString("hex")} vs ${payload.toString("hex")}`).toBe(
    true,
  );
  expect(d.id).toBe("");
  expect(d.enqueueTime).toBeUndefined();
  expect(d.headers).toEqual({});
  expect(d.queue).toBe(queue);
  expect(d.deliveryCount).toBe(1);
  expect(d.leaseToken).not.toBe("");
}

describe("raw items", () => {
  for (const queue of ["{raw}", "{raw-claims}"]) {
    it(`reliable queue ${queue}: raw items are leased in push order, with their exact bytes, and acked`, async () => {
      await pushRaw(queue, payloads);
      expect(await redis.plain.llen(queue)).toBe(payloads.length);

      const session = sy.client.lease(queue, 1);
      const got: Delivery[] = [];
      // Credit 1: each item comes only after the previous one was acked, so the order is the queue's.
      for (let i = 0; i < payloads.length; i++) {
        const [d] = await session.take(1);
        expectRaw(d, payloads[i], queue);
        expect(await redis.plain.llen(`${queue}.processing`)).toBe(1);
        expect((await redis.plain.lrangeBuffer(`${queue}.processing`, 0, -1))[0].equals(payloads[i])).toBe(true);
        got.push(d);
        if (i % 2 === 0) session.ack(d.leaseToken);
        else await sy.client.ack(d.leaseToken);
      }
      expect(new Set(got.map((d) => d.fence)).size).toBe(payloads.length);
      expect(got.map((d) => Number(d.fence))).toEqual([...got.map((d) => Number(d.fence))].sort((a, b) => a - b));

      const settled = async () => [await redis.plain.llen(queue), await redis.plain.llen(`${queue}.processing`)];
      await eventually(settled, ([q, p]) => q === 0 && p === 0);
      expect(await leaseRecords(redis.plain, `${queue}.leases`)).toEqual([]);
      if (queue === "{raw-claims}") expect(await redis.plain.zcard(`${queue}.claims`)).toBe(0);
      await session.close();
    });
  }

  it("reliable: a batch lease returns raw items in push order (LPUSH in, right end out)", async () => {
    await redis.plain.lpush("{raw}", ...payloads); // one LPUSH: the first argument ends up rightmost
    const session = sy.client.lease("{raw}", payloads.length);
    const got = await session.take(payloads.length);
    got.forEach((d, i) => expectRaw(d, payloads[i], "{raw}"));
    const processing = await redis.plain.lrangeBuffer("{raw}.processing", 0, -1);
    expect(processing).toHaveLength(payloads.length);
    for (const d of got) await sy.client.ack(d.leaseToken);
    expect(await redis.plain.llen("{raw}.processing")).toBe(0);
    expect(await redis.plain.llen("{raw}")).toBe(0);
    await session.close();
  });

  it("reliable: raw and enqueued items mix in one queue, in order", async () => {
    await redis.plain.lpush("{raw}", Buffer.from([0xde, 0xad]));
    const [id] = await sy.client.enqueue("{raw}", [{ payload: "wrapped", headers: { k: "v" } }]);
    await redis.plain.lpush("{raw}", Buffer.from([0xbe, 0xef]));
    const session = sy.client.lease("{raw}", 3);
    const [a, b, c] = await session.take(3);
    expectRaw(a, Buffer.from([0xde, 0xad]), "{raw}");
    expect(b.id).toBe(id);
    expect(Buffer.from(b.payload).toString()).toBe("wrapped");
    expect(b.headers).toEqual({ k: "v" });
    expect(b.enqueueTime).toBeDefined();
    expectRaw(c, Buffer.from([0xbe, 0xef]), "{raw}");
    session.ack(a.leaseToken);
    session.ack(b.leaseToken);
    session.ack(c.leaseToken);
    await eventually(() => redis.plain.llen("{raw}.processing"), (n) => n === 0);
    await session.close();
  });

  it("reliable: a raw item that is retried comes back with its bytes and a delivery count of 2", async () => {
    await redis.plain.lpush("{raw}", payloads[1]);
    const session = sy.client.lease("{raw}", 1);
    const [first] = await session.take(1);
    expectRaw(first, payloads[1], "{raw}");
    await sy.client.retry(first.leaseToken);
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).equals(payloads[1])).toBe(true);
    expect(second.deliveryCount).toBe(2);
    expect(second.id).toBe("");
    await sy.client.ack(second.leaseToken);
    expect(await redis.plain.llen("{raw}.processing")).toBe(0);
    expect(await leaseRecords(redis.plain, "{raw}.leases")).toEqual([]);
    await session.close();
  });

  it("reliable: a raw value that starts like an envelope but is not one (a history field sent as a varint) keeps its bytes through a retry", async () => {
    // "SYE1", an id field, then field 5 (Envelope's history) with wire type 0: not an Envelope, so a raw payload.
    const lookalike = Buffer.concat([Buffer.from("SYE1"), Buffer.from([0x0a, 0x02]), Buffer.from("id"), Buffer.from([0x28, 0x01])]);
    await redis.plain.lpush("{raw}", lookalike);
    const session = sy.client.lease("{raw}", 1);
    const [first] = await session.take(1);
    expectRaw(first, lookalike, "{raw}");
    await sy.client.retry(first.leaseToken);
    const [second] = await session.take(1);
    expect([second.id, Buffer.from(second.payload).equals(lookalike), second.deliveryCount]).toEqual(["", true, 2]);
    await sy.client.ack(second.leaseToken);
    expect(await redis.plain.llen("{raw}.processing")).toBe(0);
    await session.close();
  });

  it("simple queue: raw items are popped in push order with their exact bytes; acks are accepted", async () => {
    await pushRaw("raw.simple", payloads);
    const session = sy.client.lease("raw.simple", 1);
    for (let i = 0; i < payloads.length; i++) {
      const [d] = await session.take(1);
      expectRaw(d, payloads[i], "raw.simple");
      // At most once: the item left Redis when it was popped.
      expect(await redis.plain.llen("raw.simple")).toBe(payloads.length - i - 1);
      await sy.client.ack(d.leaseToken);
    }
    expect(await redis.plain.llen("raw.simple")).toBe(0);
    expect(await redis.plain.exists("raw.simple.processing")).toBe(0);
    await session.close();
  });

  it("reliable: two equal raw values are two items, each leased and acked once", async () => {
    // A plain producer may well push the same bytes twice (e.g. "resize:42"). Both copies must be
    // delivered, and each worker's ack must hold: nothing may stay in processing afterwards.
    await redis.plain.lpush("{raw}", "resize:42", "resize:42");
    const session = sy.client.lease("{raw}", 2);
    const [a, b] = await session.take(2);
    expectRaw(a, Buffer.from("resize:42"), "{raw}");
    expect(Buffer.from(b.payload).toString()).toBe("resize:42");
    const outcomes = await Promise.allSettled([sy.client.ack(a.leaseToken), sy.client.ack(b.leaseToken)]);
    await session.close();
    const processing = await redis.plain.lrange("{raw}.processing", 0, -1);
    const acks = outcomes.map((o) => (o.status === "fulfilled" ? "ok" : (o.reason as Error).message));
    expect({ processing, acks }).toEqual({ processing: [], acks: ["ok", "ok"] });
    expect(await redis.plain.llen("{raw}")).toBe(0);
    expect(b.deliveryCount, "the second copy's first delivery").toBe(1);
  });

  it('a raw value that happens to be the envelope marker "SYE1" keeps its bytes', async () => {
    // Switchyard's envelopes always carry an id and an enqueue time; a value without them is raw.
    await redis.plain.lpush("raw.simple", "SYE1");
    const session = sy.client.lease("raw.simple", 1);
    const [d] = await session.take(1);
    await session.close();
    expect(Buffer.from(d.payload).toString("latin1")).toBe("SYE1");
    expect(d.id).toBe("");
  });
});

/** Polls `probe` until `done` accepts its value; fails after 10 s. */
async function eventually<T>(probe: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out; last value: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
