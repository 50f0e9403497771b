/**
 * A queue deleted and declared again with other key names (keysOf answers are
 * cached per declaration): on the instance that did it and on another that learns
 * it by pub/sub, lease, retry (dead letters), the watchdog's recovery and its
 * claims use the new keys; UpdateQueue keeps the keys.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const Q = "{rk}";
let redis: TestRedis;
let a: TestSwitchyard;
let b: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  a = await startSwitchyard(redis, { config: { watchdogIntervalMs: 3_600_000 } });
  b = await startSwitchyard(redis, { config: { watchdogIntervalMs: 3_600_000 } });
});
afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await redis?.stop();
});

const declare = (sy: TestSwitchyard, n: number) =>
  sy.client.createQueue({
    name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(60_000), maxDeliveries: 2,
    processingList: `${Q}.proc${n}`, recoverySet: `${Q}.claims${n}`, deadLetterList: `${Q}.dead${n}`,
    retryPolicy: { initialBackoff: durationFromMs(0) },
  });

/** On `sy`: one item leased and retried (back on the queue), leased again and left to the watchdog (dead-lettered: 2nd delivery). */
async function exercise(sy: TestSwitchyard, n: number, other: number) {
  await redis.plain.del(`${Q}.dead${n}`);
  await sy.client.enqueue(Q, [`item${n}`]);
  const lease = sy.client.lease(Q, 1);
  const [d1] = await lease.take(1);
  expect(await redis.plain.llen(`${Q}.proc${n}`)).toBe(1);
  expect(await redis.plain.zcard(`${Q}.claims${n}`)).toBe(1);
  expect(await redis.plain.exists(`${Q}.proc${other}`, `${Q}.claims${other}`)).toBe(0);
  expect((await sy.client.retry(d1.leaseToken)).deadLettered).toBe(false);
  const [d2] = await lease.take(1);
  expect(d2.id).toBe(d1.id);
  lease.setCredit(0);
  await (sy.clock as ManualClock).advance(60_001);
  const pass = await sy.app.queues.watchdog.pass();
  expect(pass).toMatchObject({ recovered: 0, deadLettered: 1 });
  expect(await redis.plain.llen(`${Q}.dead${n}`)).toBe(1);
  expect(await redis.plain.exists(`${Q}.proc${n}`, `${Q}.claims${n}`, `${Q}.dead${other}`)).toBe(0);
  await lease.cancel();
  await lease.ended;
}

describe("keysOf after a queue is declared again with other keys", () => {
  it("uses the new keys on the declaring instance and on another one", async () => {
    await declare(a, 1);
    await exercise(a, 1, 2);
    await exercise(b, 1, 2);
    await redis.plain.del(`${Q}.dead1`);
    await a.client.deleteQueue(Q, { purge: true });
    await declare(a, 2);
    await expect.poll(async () => (await b.client.getQueue(Q)).processingList).toBe(`${Q}.proc2`);
    await exercise(b, 2, 1);
    await exercise(a, 2, 1);
    await redis.plain.del(`${Q}.dead2`);
    // UpdateQueue: a setting changes, the keys do not (and may not).
    await a.client.updateQueue({ name: Q, maxDeliveries: 3 }, ["max_deliveries"]);
    await expect(a.client.updateQueue({ name: Q, processingList: `${Q}.proc3` }, ["processing_list"])).rejects.toMatchObject({ code: 9 });
    await expect.poll(async () => (await b.client.getQueue(Q)).maxDeliveries).toBe(3);
    await b.client.enqueue(Q, ["after update"]);
    const lease = b.client.lease(Q, 1);
    const [d] = await lease.take(1);
    expect(await redis.plain.llen(`${Q}.proc2`)).toBe(1);
    await b.client.ack(d.leaseToken);
    expect(await redis.plain.llen(`${Q}.proc2`)).toBe(0);
    await lease.cancel();
    await lease.ended;
    // Back to the first names.
    await a.client.deleteQueue(Q, { purge: true });
    await declare(b, 1);
    await expect.poll(async () => (await a.client.getQueue(Q)).processingList).toBe(`${Q}.proc1`);
    await exercise(a, 1, 2);
    await exercise(b, 1, 2);
  });
});
