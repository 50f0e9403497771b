/**
 * Issue 12 defects 6 and 7: equal raw values pushed by a plain producer are
 * separate items. Each delivery has its own claim, so a crashed copy's claim
 * is not kept fresh by its twins; each item has its own delivery count, so a
 * copy is not charged for another's deliveries.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { leaseRecords, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const MIN_IDLE_MS = 60_000;
let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  clock = sy.clock as ManualClock;
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

const text = (b: Uint8Array) => Buffer.from(b).toString();

describe("equal raw values: claims", () => {
  it("a crashed copy is recovered after min_idle while its twins keep being leased, extended and acked", async () => {
    const q = "{eq-claims}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: `${q}.claims`, minIdle: durationFromMs(MIN_IDLE_MS) });
    await redis.plain.lpush(q, "x");
    const crashed = sy.client.lease(q, 1);
    const [held] = await crashed.take(1);
    crashed.setCredit(0); // the crashed worker never settles and takes nothing more

    // Twins flow every 10 s for two min_idles: each is leased, extended and acked.
    const busy = sy.client.lease(q, 1);
    const seen: [number, string][] = [];
    for (let t = 0; t < (2 * MIN_IDLE_MS) / 10_000; t++) {
      await redis.plain.lpush(q, "x");
      const [twin] = await busy.take(1);
      expect(text(twin.payload)).toBe("x");
      seen.push([twin.deliveryCount, twin.lastError]);
      await sy.client.extendLease(twin.leaseToken);
      await sy.client.ack(twin.leaseToken);
      await clock.advance(10_000);
    }
    // The crashed copy went back at min_idle and was delivered again (its second delivery, saying why);
    // every twin was on its first.
    expect(seen.filter(([n]) => n === 2)).toEqual([[2, expect.stringContaining("min_idle")]]);
    expect(seen.filter(([n]) => n === 1)).toHaveLength(seen.length - 1);
    const late = await sy.client.ack(held.leaseToken).then(() => 0, (e: grpc.ServiceError) => e.code);
    expect(late).toBe(grpc.status.FAILED_PRECONDITION);
    await busy.close();
    await crashed.close();
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    expect(await redis.plain.zcard(`${q}.claims`)).toBe(0);
  });

  it("two copies held at once each have a claim; acking one leaves the other's", async () => {
    const q = "{eq-two}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: `${q}.claims`, minIdle: durationFromMs(MIN_IDLE_MS) });
    await redis.plain.lpush(q, "x", "x");
    const lease = sy.client.lease(q, 2);
    const [a, b] = await lease.take(2);
    expect(await redis.plain.zcard(`${q}.claims`)).toBe(2);
    // The first copy's claim is the value itself, as the seed records it.
    expect(await redis.plain.zscore(`${q}.claims`, "x")).toBe(String(clock.now()));
    await sy.client.ack(a.leaseToken);
    expect(await redis.plain.zcard(`${q}.claims`)).toBe(1);
    lease.setCredit(0);
    await clock.advance(MIN_IDLE_MS + 1000);
    // b's claim aged alone and was recovered: its copy is back in the queue.
    expect(await redis.plain.llen(q)).toBe(1);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    await expect(sy.client.ack(b.leaseToken)).rejects.toMatchObject({ code: grpc.status.FAILED_PRECONDITION });
    await lease.close();
  });
});

describe("equal raw values: delivery counts", () => {
  it("a copy's first delivery counts 1, whatever its twin went through", async () => {
    const q = "{eq-count}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await redis.plain.lpush(q, "x", "x");
    const lease = sy.client.lease(q, 1);
    const [first] = await lease.take(1);
    expect(first.deliveryCount).toBe(1);
    await sy.client.retry(first.leaseToken, { reason: "flaky" }); // back of the queue, behind its twin
    const [twin] = await lease.take(1);
    expect([text(twin.payload), twin.deliveryCount, twin.lastError]).toEqual(["x", 1, ""]);
    await sy.client.ack(twin.leaseToken);
    const [again] = await lease.take(1);
    expect([text(again.payload), again.deliveryCount, again.lastError, again.id]).toEqual(["x", 2, "flaky", ""]);
    await sy.client.ack(again.leaseToken);
    await lease.close();
  });

  it("each copy is dead-lettered after its own max_deliveries, not after its twins' deliveries", async () => {
    const q = "{eq-dead}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 3 });
    await redis.plain.lpush(q, "x", "x");
    const lease = sy.client.lease(q, 1);
    const counts: number[] = [];
    const dead: boolean[] = [];
    for (let n = 0; n < 6; n++) {
      const [d] = await lease.take(1);
      counts.push(d.deliveryCount);
      dead.push((await sy.client.retry(d.leaseToken, { reason: `attempt ${d.deliveryCount}` })).deadLettered);
    }
    // The copies alternate (a retry goes to the back): 1, 1, 2, 2, 3, 3; each dies on its third.
    expect(counts).toEqual([1, 1, 2, 2, 3, 3]);
    expect(dead).toEqual([false, false, false, false, true, true]);
    const letters = (await sy.client.peekQueue(q, 2 /* DEAD_LETTER */)).items;
    expect(letters.map((i) => [text(i.payload), i.deliveryCount, i.lastError])).toEqual([
      ["x", 3, "attempt 3"],
      ["x", 3, "attempt 3"],
    ]);
    await lease.close();
    // Requeued, they start over: raw values again, with no history.
    expect(await sy.client.requeueDeadLetters(q, "all")).toBe(2);
    expect(await redis.plain.lrange(q, 0, -1)).toEqual(["x", "x"]);
  });
});
