/**
 * Delayed items due at one moment on three instances (issue 14): every
 * instance's mover runs at once (one shared ManualClock), in calls of a few
 * hundred items, several in flight; each item is moved onto the queue exactly
 * once. (Bench row 10 measures the same at 10,000 items on the real clock.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const clock = new ManualClock();
let redis: TestRedis;
let instances: TestSwitchyard[];
beforeAll(async () => {
  redis = await startRedis();
  instances = await Promise.all([0, 1, 2].map(() => startSwitchyard(redis, { clock })));
});
afterAll(async () => {
  await Promise.all(instances.map((sy) => sy.stop()));
  await redis.stop();
});

describe("delayed items due at once on three instances", () => {
  it("are each moved onto the queue exactly once", async () => {
    const Q = "{due-together}";
    const N = 2500; // more than the in-flight calls of one round (4 × 200) on each instance
    await instances[0].client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await expect.poll(() => instances.every((sy) => sy.app.queues.registry.cached(Q) !== undefined)).toBe(true);
    const due = new Date(clock.now() + 60_000);
    const ids: string[] = [];
    // A third through each instance, so each one's mover arms its timer for the moment.
    for (let i = 0; i < N; i += 500) {
      const sy = instances[(i / 500) % 3];
      ids.push(...(await sy.client.enqueue(Q, Array.from({ length: 500 }, (_, j) => ({ payload: `item-${i + j}`, notBefore: due })))));
    }
    expect(await instances[1].client.getQueueStats(Q)).toMatchObject({ ready: 0n, delayed: BigInt(N) });

    await clock.advance(60_000);
    await expect.poll(async () => (await instances[2].client.getQueueStats(Q)).ready, { timeout: 10_000 }).toBe(BigInt(N));
    expect((await instances[2].client.getQueueStats(Q)).delayed).toBe(0n);
    // Every id once: read the ready list through PeekQueue's total, then lease them all.
    expect((await instances[0].client.peekQueue(Q, QueueList.READY)).total).toBe(BigInt(N));
    const lease = instances[0].client.lease(Q, 1000);
    const got: string[] = [];
    while (got.length < N) {
      for (const d of await lease.take(Math.min(500, N - got.length))) {
        got.push(d.id);
        lease.ack(d.leaseToken);
      }
    }
    await lease.close();
    expect(new Set(got).size).toBe(N);
    expect([...got].sort()).toEqual([...ids].sort());
    expect(await instances[0].client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n, delayed: 0n });
  });
});
