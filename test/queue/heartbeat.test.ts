/** Lease streams stay healthy: heartbeats (SPEC Q12) and credit freed by settles elsewhere. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let a: TestSwitchyard;
let b: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  a = await startSwitchyard(redis);
  b = await startSwitchyard(redis);
});
afterAll(async () => {
  await Promise.all([a.stop(), b.stop()]);
  await redis.stop();
});

describe("lease stream health", () => {
  it("sends a heartbeat every 15 s on an idle stream", async () => {
    await a.client.createQueue({ name: "{idle}", mode: QueueMode.RELIABLE });
    const lease = a.client.lease("{idle}", 1);
    const opened = await lease.opened;
    expect(Number(opened.heartbeatInterval!.seconds)).toBe(15);
    await (a.clock as ManualClock).advance(14_999);
    expect(lease.heartbeatCount).toBe(0);
    await (a.clock as ManualClock).advance(1);
    await expect.poll(() => lease.heartbeatCount).toBe(1);
    await (a.clock as ManualClock).advance(30_000);
    await expect.poll(() => lease.heartbeatCount).toBe(3);
    await lease.close();
  });

  it("a closed stream leaves no timer behind (its heartbeat would keep the stream and its call in memory until it fired)", async () => {
    const Q = "{churn}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const clock = a.clock as ManualClock;
    const before = clock.pending;
    const leases = Array.from({ length: 50 }, () => a.client.lease(Q, 1));
    await Promise.all(leases.map((l) => l.opened));
    expect(clock.pending).toBeGreaterThanOrEqual(before + 50);
    await Promise.all(leases.map((l) => l.close()));
    await expect.poll(async () => (await a.app.queues.stats(Q)).leaseStreams).toBe(0);
    expect(clock.pending).toBe(before);
  });

  it("frees the credit of an item acked through another instance by the next heartbeat", async () => {
    const Q = "{elsewhere}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const ids = await a.client.enqueue(Q, ["first", "second"]);
    const lease = a.client.lease(Q, 1);
    const [first] = await lease.take(1);
    expect(first.id).toBe(ids[0]);
    await b.client.ack(first.leaseToken);
    await (a.clock as ManualClock).advance(15_000);
    const [second] = await lease.take(1);
    expect(second.id).toBe(ids[1]);
    await lease.close();
  });

  it("ends the streams of a deleted queue with NOT_FOUND and returns their items", async () => {
    const Q = "{doomed}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await a.client.enqueue(Q, ["x"]);
    const lease = a.client.lease(Q, 1);
    await lease.take(1);
    await b.client.deleteQueue(Q);
    const err = await lease.ended;
    expect(err).toMatchObject({ code: 5 });
    expect(await redis.plain.llen(Q)).toBe(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });
});
