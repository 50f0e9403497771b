/** The watchdog (SPEC Q5) and the return of a closed stream's items (Q10). */
import { decodeItem } from "../../src/queue/envelope.js";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const MIN_IDLE_MS = 60_000;
let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;
const Q = "{thumbnails}";

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  clock = sy.clock as ManualClock;
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${Q}.claims` });
});
beforeEach(async () => {
  await redis.plain.del(Q, `${Q}.processing`, `${Q}.claims`, `${Q}.leases`, `${Q}.deliveries`);
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

describe("watchdog", () => {
  it("returns an unsettled item once its claim is idle past min_idle, and never an acked one", async () => {
    const [renderedId, stalledId] = await sy.client.enqueue(Q, ["rendered", "stalled"]);
    const lease = sy.client.lease(Q, 2);
    const [rendered, stalled] = await lease.take(2);
    expect([rendered.id, stalled.id]).toEqual([renderedId, stalledId]);
    await sy.client.ack(rendered.leaseToken);
    lease.setCredit(0); // the stalled worker takes nothing more

    await clock.advance(MIN_IDLE_MS - 1);
    expect(await redis.plain.llen(Q)).toBe(0);

    await clock.advance(2);
    // Only the stalled render came back; the acked one is gone for good.
    const queued = await redis.plain.lrangeBuffer(Q, 0, -1);
    expect(queued).toHaveLength(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(0);

    // The late ack of the stalled worker is refused: the item was recovered.
    await expect(sy.client.ack(stalled.leaseToken)).rejects.toMatchObject({ code: 9 });
    expect(await redis.plain.llen(Q)).toBe(1);
    await lease.cancel();
    await lease.ended;
  });

  it("recovers a processing item that has no claim record (moved by another client)", async () => {
    await redis.plain.lpush(Q, "orphan");
    await redis.plain.lmove(Q, `${Q}.processing`, "RIGHT", "LEFT");
    await clock.advance(1000); // the next pass records a claim
    const claimedAt = Number(await redis.plain.zscore(`${Q}.claims`, "orphan"));
    expect(claimedAt).toBeGreaterThan(clock.now() - 1000);
    expect(claimedAt).toBeLessThanOrEqual(clock.now());
    await clock.advance(MIN_IDLE_MS + 1000);
    // Back in the queue as the payload of an envelope that records its one delivery and why it came back.
    const back = (await redis.plain.lrangeBuffer(Q, 0, -1)).map(decodeItem);
    expect(back.map((i) => [Buffer.from(i.payload).toString(), i.id, i.deliveries, i.lastError])).toEqual([
      ["orphan", "", 1, "not settled within min_idle (60 s): recovered by the watchdog"],
    ]);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });

  it("extending a lease restarts its idle time", async () => {
    await sy.client.enqueue(Q, ["long job"]);
    const lease = sy.client.lease(Q, 1);
    const [job] = await lease.take(1);
    await clock.advance(MIN_IDLE_MS - 1000);
    const { expireTime } = await sy.client.extendLease(job.leaseToken);
    expect(Number(expireTime!.seconds) * 1000 + expireTime!.nanos / 1e6).toBe(clock.now() + MIN_IDLE_MS);
    await clock.advance(MIN_IDLE_MS - 1000);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    await sy.client.ack(job.leaseToken);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.llen(Q)).toBe(0);
    await lease.close();
  });
});

describe("tombstones", () => {
  it("keep the newest 100,000 fences: a call that recovers or returns past the bound drops the oldest, never its own", async () => {
    // 100,000 tombstones of long-gone deliveries (fences far above any this test issues, scored long ago).
    const key = `${Q}.returned`;
    await redis.plain.del(key);
    for (let chunk = 0; chunk < 100; chunk++) {
      const args: (string | number)[] = [];
      for (let i = 0; i < 1000; i++) args.push(chunk * 1000 + i, 1e12 + chunk * 1000 + i);
      await redis.plain.zadd(key, ...args);
    }
    await sy.client.enqueue(Q, ["a", "b", "c"]);
    const stalled = sy.client.lease(Q, 2);
    const [a, b] = await stalled.take(2);
    stalled.setCredit(0);
    await clock.advance(2 * MIN_IDLE_MS);
    expect(await redis.plain.llen(Q)).toBe(3);
    // The watchdog recovered both: their fences are tombstones now, and the two oldest went.
    expect(await redis.plain.zcard(key)).toBe(100_000);
    expect(await redis.plain.zscore(key, String(a.fence))).not.toBeNull();
    expect(await redis.plain.zscore(key, String(b.fence))).not.toBeNull();
    expect(await redis.plain.zrange(key, 0, 0)).toEqual([String(1e12 + 2)]);
    await expect(sy.client.ack(a.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
    await stalled.cancel();
    await stalled.ended;

    // A closed stream's return (settle.lua, action "b") keeps the bound too.
    const closing = sy.client.lease(Q, 1);
    const [c] = await closing.take(1);
    await closing.cancel();
    await closing.ended;
    await expect.poll(() => redis.plain.zscore(key, String(c.fence))).not.toBeNull();
    expect(await redis.plain.zcard(key)).toBe(100_000);
    expect(await redis.plain.zrange(key, 0, 0)).toEqual([String(1e12 + 3)]);
  });
});

describe("lease stream end", () => {
  it("returns a closed stream's unsettled items at once, without waiting for min_idle", async () => {
    const ids = await sy.client.enqueue(Q, ["1", "2", "3"]);
    const first = sy.client.lease(Q, 3);
    const held = await first.take(3);
    await sy.client.ack(held[0].leaseToken);
    first.cancel(); // as a crashed worker's connection ends
    await first.ended;
    const second = sy.client.lease(Q, 3);
    const again = await second.take(2);
    expect(again.map((d) => d.id)).toEqual([ids[1], ids[2]]); // still in queue order
    expect(again.every((d) => d.deliveryCount === 2)).toBe(true);
    for (const d of again) second.ack(d.leaseToken);
    await second.close();
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.llen(Q)).toBe(0);
  });
});
