/** Fencing (SPEC Q11) and dead letters (Q10). */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
  await sy.stop();
  await redis.stop();
});

describe("fencing", () => {
  it("refuses a late ack with a superseded lease token and leaves the new holder's item in place", async () => {
    const Q = "{fence}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${Q}.claims` });
    const [id] = await sy.client.enqueue(Q, ["render"]);
    const stalled = sy.client.lease(Q, 1);
    const [first] = await stalled.take(1);
    stalled.setCredit(0);

    await clock.advance(MIN_IDLE_MS + 1000); // the watchdog recovers it from the stalled worker
    const fresh = sy.client.lease(Q, 1);
    const [second] = await fresh.take(1);
    expect(second.id).toBe(id);
    expect(second.deliveryCount).toBe(2);
    expect(second.fence).toBeGreaterThan(first.fence);

    for (const settle of [() => sy.client.ack(first.leaseToken), () => sy.client.drop(first.leaseToken), () => sy.client.retry(first.leaseToken), () => sy.client.extendLease(first.leaseToken)]) {
      await expect(settle()).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
    }
    // The late settles changed nothing: the new holder's copy is still in processing.
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    expect(await redis.plain.llen(Q)).toBe(0);

    // The same late ack on the stalled worker's stream comes back as a settle result.
    const results: { code: number; leaseToken: string }[] = [];
    stalled.onSettleResult((r) => results.push(r));
    stalled.ack(first.leaseToken);
    await expect.poll(() => results.length).toBe(1);
    expect(results[0]).toMatchObject({ code: 9, leaseToken: first.leaseToken });
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);

    await sy.client.ack(second.leaseToken);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await Promise.all([stalled.close(), fresh.close()]);
  });

  it("gives every lease of a queue a higher fence number", async () => {
    const Q = "{fence-order}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a", "b", "c", "d"]);
    const lease = sy.client.lease(Q, 4);
    const fences = (await lease.take(4)).map((d) => d.fence);
    expect(fences).toEqual([1n, 2n, 3n, 4n]);
    await lease.close();
  });

  it("writes fences past 10^14 in full, so each delivery keeps a record of its own that its token settles", async () => {
    // Lua turns a number into text with 14 significant digits: 10^14 + 1 would become "1e+14", the record of
    // two deliveries would be one, and no token (written in full digits) would find it.
    const Q = "{fence-big}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${Q}.claims` });
    await redis.plain.set(`${Q}.fence`, "99999999999998");
    await sy.client.enqueue(Q, ["a", "b", "c", "d"]);
    const lease = sy.client.lease(Q, 4);
    const taken = await lease.take(4);
    expect(taken.map((d) => d.fence)).toEqual([99999999999999n, 100000000000000n, 100000000000001n, 100000000000002n]);
    const records = await leaseRecords(redis.plain, `${Q}.leases`);
    expect(records.filter((f) => !f.startsWith("m:") && !f.startsWith("n:")).map((f) => f.slice(0, f.indexOf("@"))).sort()).toEqual(
      ["100000000000000", "100000000000001", "100000000000002", "99999999999999"],
    );
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(4);

    for (const d of taken.slice(0, 3)) await sy.client.ack(d.leaseToken);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    lease.setCredit(0);
    await clock.advance(MIN_IDLE_MS + 1000); // the watchdog recovers the one left, by its record
    await expect.poll(() => redis.plain.llen(Q)).toBe(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(0);
    await lease.close();
  });
});

describe("dead letters", () => {
  it("delivers a poison item max_deliveries times, then parks it in the dead-letter list while other items flow", async () => {
    const Q = "{poison}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, maxDeliveries: 3 });
    const [poisonId] = await sy.client.enqueue(Q, ["poison"]);
    const goodIds = await sy.client.enqueue(Q, ["good-1", "good-2", "good-3", "good-4"]);
    const lease = sy.client.lease(Q, 1);
    const poisonDeliveries: number[] = [];
    const acked: string[] = [];
    while (acked.length < goodIds.length || poisonDeliveries.length < 3) {
      const [d] = await lease.take(1);
      if (d.id === poisonId) {
        poisonDeliveries.push(d.deliveryCount);
        const { deadLettered } = await sy.client.retry(d.leaseToken);
        expect(deadLettered).toBe(d.deliveryCount === 3);
      } else {
        acked.push(d.id);
        await sy.client.ack(d.leaseToken);
      }
    }
    expect(poisonDeliveries).toEqual([1, 2, 3]);
    expect(acked.sort()).toEqual([...goodIds].sort());
    const dead = await redis.plain.lrangeBuffer(`${Q}.dead`, 0, -1);
    expect(dead).toHaveLength(1);
    expect(dead[0].includes(Buffer.from("poison"))).toBe(true);
    expect(await redis.plain.llen(Q)).toBe(0);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await leaseRecords(redis.plain, `${Q}.leases`)).toEqual([]);
    const stats = await sy.client.getQueueStats(Q);
    expect(stats.deadLetter).toBe(1n);
    await lease.close();
  });

  it("counts a delivery whose stream died, so a worker-crashing item still ends in the dead-letter list", async () => {
    const Q = "{crasher}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, maxDeliveries: 2 });
    await sy.client.enqueue(Q, ["crashes the worker"]);
    for (let attempt = 1; attempt <= 2; attempt++) {
      const lease = sy.client.lease(Q, 1);
      const [d] = await lease.take(1);
      expect(d.deliveryCount).toBe(attempt);
      lease.cancel();
      await lease.ended;
      await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    }
    expect(await redis.plain.llen(`${Q}.dead`)).toBe(1);
    expect(await redis.plain.llen(Q)).toBe(0);
  });
});
