/**
 * Items that wait (SPEC Q17, issue 14): enqueued with a delay or a time, or
 * retried after a backoff, they sit in the queue's delayed set and become
 * ready when due, on the injected clock; idempotency keys (Q18) make a
 * repeated Enqueue add nothing within the queue's window.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
const clock = () => t.sy.clock as ManualClock;
const ms = (ts: { seconds: bigint; nanos: number } | undefined) => (ts ? Number(ts.seconds) * 1000 + Math.round(ts.nanos / 1e6) : 0);

describe("delayed items", () => {
  it("wait in the delayed set until due, then are leased like any other", async () => {
    const { sy, redis } = t;
    const q = "{later}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const [now, later, past] = await sy.client.enqueue(q, [
      "now",
      { payload: "later", delayMs: 30_000 },
      { payload: "past", notBefore: new Date(clock().now() - 1000) },
    ]);
    expect(await sy.client.getQueueStats(q)).toMatchObject({ ready: 2n, delayed: 1n });
    const peek = await sy.client.peekQueue(q, QueueList.DELAYED);
    expect(peek.items.map((i) => [i.id, ms(i.notBefore)])).toEqual([[later, clock().now() + 30_000]]);

    const lease = sy.client.lease(q, 3);
    expect((await lease.take(2)).map((d) => d.id)).toEqual([now, past]);
    await clock().advance(29_999);
    expect(await redis.plain.zcard(`${q}.delayed`)).toBe(1);
    await clock().advance(1);
    const [d] = await lease.take(1);
    expect([d.id, d.deliveryCount]).toEqual([later, 1]);
    expect(await redis.plain.zcard(`${q}.delayed`)).toBe(0);
    await lease.close();
  });

  it("refuses an item with both a delay and a time, naming the item", async () => {
    const err = await t.sy.client
      .enqueue("{later}", ["fine", { payload: "both", delayMs: 1000, notBefore: new Date() }])
      .then(() => undefined, (e: grpc.ServiceError) => e);
    expect([err?.code, err?.details]).toEqual([grpc.status.INVALID_ARGUMENT, expect.stringContaining("items[1].delay")]);
  });
});

describe("idempotency keys", () => {
  it("make a repeated enqueue add nothing within the window and answer the first id; after it, the key is free", async () => {
    const { sy, redis } = t;
    const q = "{once}";
    await sy.client.createQueue({ name: q, mode: QueueMode.SIMPLE, idempotencyWindow: durationFromMs(60_000) });
    const [first] = await sy.client.enqueue(q, [{ payload: "order-1", idempotencyKey: "order-1" }]);
    const [again, other] = await sy.client.enqueue(q, [
      { payload: "order-1 again", idempotencyKey: "order-1" },
      { payload: "order-2", idempotencyKey: "order-2" },
    ]);
    expect(again).toBe(first);
    expect(other).not.toBe(first);
    expect(await redis.plain.llen(q)).toBe(2);
    await clock().advance(60_001);
    const [late] = await sy.client.enqueue(q, [{ payload: "order-1 later", idempotencyKey: "order-1" }]);
    expect(late).not.toBe(first);
    expect(await redis.plain.llen(q)).toBe(3);
  });
});

describe("retries with backoff", () => {
  it("wait the policy's time, within its jitter, and carry the reason; a poison item is dead-lettered with its last reason", async () => {
    const { sy } = t;
    const q = "{backoff}";
    const policy = { initialBackoff: durationFromMs(1000), multiplier: 2, maxBackoff: durationFromMs(4000), jitter: 0.5 };
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 5, retryPolicy: policy });
    const [id] = await sy.client.enqueue(q, ["poison"]);
    const lease = sy.client.lease(q, 1);
    const waits: number[] = [];
    for (let attempt = 1; attempt <= 5; attempt++) {
      const [d] = await lease.take(1);
      expect([d.id, d.deliveryCount, d.lastError]).toEqual([id, attempt, attempt === 1 ? "" : `failed ${attempt - 1}`]);
      const r = await sy.client.retry(d.leaseToken, { reason: `failed ${attempt}` });
      if (attempt === 5) {
        expect([r.deadLettered, r.notBefore]).toEqual([true, undefined]);
        break;
      }
      const wait = ms(r.notBefore) - clock().now();
      waits.push(wait);
      const full = Math.min(1000 * 2 ** (attempt - 1), 4000);
      expect(wait).toBeGreaterThanOrEqual(full * 0.5);
      expect(wait).toBeLessThanOrEqual(full);
      await clock().advance(wait);
    }
    const [dead] = (await sy.client.peekQueue(q, QueueList.DEAD_LETTER)).items;
    expect([dead.id, dead.deliveryCount, dead.lastError]).toEqual([id, 5, "failed 5"]);
    // Four waits of about 1 + 2 + 4 + 4 s: the deliveries were spread over seconds, not milliseconds.
    expect(waits.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(5500);
    await lease.close();
  });

  it("items the watchdog recovers wait the policy's time too, and a stalling item dead-letters with the watchdog's reason", async () => {
    const { sy } = t;
    const q = "{stalls}";
    const minIdle = 10_000;
    // (jitter 0 reads as unset, the default 0.2: a proto3 double cannot tell them apart.)
    const policy = { initialBackoff: durationFromMs(5000), multiplier: 2, maxBackoff: durationFromMs(60_000), jitter: 0.5 };
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 3, minIdle: durationFromMs(minIdle), recoverySet: `${q}.claims`, retryPolicy: policy });
    const [id] = await sy.client.enqueue(q, ["stalls"]);
    // A worker that takes items and never settles them (credit for every delivery).
    const lease = sy.client.lease(q, 3);
    const reason = "not settled within min_idle (10 s): recovered by the watchdog";
    let leasedAt = clock().now();
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [d] = await lease.take(1);
      expect([d.id, d.deliveryCount, d.lastError]).toEqual([id, attempt, attempt === 1 ? "" : reason]);
      if (attempt === 3) break;
      // The watchdog (a pass a second) takes it back once idle past min_idle, then it waits the policy's backoff.
      for (let s = 0; s < minIdle / 1000 + 1; s++) await clock().advance(1000);
      const [waiting] = (await sy.client.peekQueue(q, QueueList.DELAYED)).items;
      expect([waiting.id, waiting.lastError]).toEqual([id, reason]);
      // Recovered at a pass within a second after min_idle, then the backoff of this attempt, less at most half (jitter 0.5).
      const full = 5000 * 2 ** (attempt - 1);
      const due = ms(waiting.notBefore) - leasedAt;
      expect(due).toBeGreaterThanOrEqual(minIdle + full * 0.5);
      expect(due).toBeLessThanOrEqual(minIdle + 1000 + full);
      await clock().advance(ms(waiting.notBefore) - clock().now() - 1);
      expect((await sy.client.getQueueStats(q)).delayed).toBe(1n);
      await clock().advance(1);
      leasedAt = clock().now();
    }
    for (let s = 0; s < minIdle / 1000 + 1; s++) await clock().advance(1000);
    const [dead] = (await sy.client.peekQueue(q, QueueList.DEAD_LETTER)).items;
    expect([dead.id, dead.deliveryCount, dead.lastError]).toEqual([id, 3, reason]);
    expect(await sy.client.getQueueStats(q)).toMatchObject({ ready: 0n, delayed: 0n, processing: 0n, deadLetter: 1n });
    await lease.close();
  });

  it("a retry's own delay wins over the policy, and 0 retries at once", async () => {
    const { sy } = t;
    const q = "{own-delay}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, retryPolicy: { initialBackoff: durationFromMs(60_000) } });
    await sy.client.enqueue(q, ["x"]);
    const lease = sy.client.lease(q, 1);
    const [a] = await lease.take(1);
    expect(ms((await sy.client.retry(a.leaseToken, { delayMs: 5000 })).notBefore)).toBe(clock().now() + 5000);
    await clock().advance(5000);
    const [b] = await lease.take(1);
    expect(ms((await sy.client.retry(b.leaseToken, { delayMs: 0 })).notBefore)).toBe(clock().now());
    const [c] = await lease.take(1);
    expect(c.deliveryCount).toBe(3);
    // As far ahead as an Enqueue's delay may go, not 10,000 years (the most a Duration holds).
    const far = await sy.client.retry(c.leaseToken, { delayMs: 315_576_000_000 * 1000 }).then(() => undefined, (e: grpc.ServiceError) => e);
    expect([far?.code, far?.details]).toEqual([grpc.status.INVALID_ARGUMENT, expect.stringContaining("delay is more than 10 years")]);
    await sy.client.ack(c.leaseToken);
    await lease.close();
  });
});

describe("idempotency keys past their window", () => {
  it("are forgotten at least as fast as enqueues add keys, so the keys kept stay bounded under batched enqueues", async () => {
    const { sy, redis } = t;
    const q = "{forget}";
    await sy.client.createQueue({ name: q, mode: QueueMode.SIMPLE, idempotencyWindow: durationFromMs(1000) });
    const sizes: number[] = [];
    for (let round = 0; round < 4; round++) {
      await sy.client.enqueue(q, Array.from({ length: 500 }, (_, i) => ({ payload: "x", idempotencyKey: `r${round}-${i}` })));
      sizes.push(await redis.plain.zcard(`${q}.idempotency-time`), await redis.plain.hlen(`${q}.idempotency`));
      await clock().advance(1001);
    }
    // Each call forgets the keys whose window passed (those of the round before): only its own 500 remain.
    expect(sizes).toEqual(Array(8).fill(500));
  });
});

describe("an ack's replies", () => {
  it("keep their delay and idempotency key: a reply repeated with its key adds nothing, a delayed one waits", async () => {
    const { sy, redis } = t;
    await sy.client.createQueue({ name: "{asks}", mode: QueueMode.RELIABLE });
    await sy.client.createQueue({ name: "{answers}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{asks}", ["a", "b"]);
    const lease = sy.client.lease("{asks}", 2);
    const [a, b] = await lease.take(2);
    const reply = (payload: string) => ({ queue: "{answers}", items: [{ payload, delayMs: 60_000, idempotencyKey: "answer-1" }] });
    const first = await sy.client.ack(a.leaseToken, reply("answer"));
    // The same reply sent again (a worker that acked twice after a crash, say): the first id, nothing added.
    const again = await sy.client.ack(b.leaseToken, reply("answer, again"));
    expect(again.replyIds).toEqual(first.replyIds);
    expect([await redis.plain.llen("{answers}"), await redis.plain.zcard("{answers}.delayed")]).toEqual([0, 1]);
    await clock().advance(60_000);
    const out = sy.client.lease("{answers}", 1);
    expect((await out.take(1)).map((d) => [d.id, Buffer.from(d.payload).toString()])).toEqual([[first.replyIds[0], "answer"]]);
    await out.close();
    await lease.close();
  });
});
