/**
 * One watchdog pass over a backlog larger than one recover.lua call takes: the
 * pass keeps a call in flight ahead of the one it awaits, and must still
 * recover every stale claim once, count each once, and fail whole (with no
 * unhandled rejection) when its calls fail. The instance's periodic watchdog
 * is pushed out of the way, so the test's pass() is the only one.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../src/queue/envelope.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const MIN_IDLE_MS = 60_000;
const Q = "{renders}";
let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis, { config: { watchdogIntervalMs: 3_600_000 } });
  clock = sy.clock as ManualClock;
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${Q}.claims` });
});
beforeEach(async () => {
  await redis.plain.del(Q, `${Q}.processing`, `${Q}.claims`, `${Q}.leases`);
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

/** Leases every item of `payloads` on one stream that then stalls; resolves to the deliveries. */
async function leaseAndStall(payloads: string[]) {
  await sy.client.enqueue(Q, payloads);
  const lease = sy.client.lease(Q, payloads.length);
  const held = await lease.take(payloads.length);
  lease.setCredit(0);
  return { lease, held };
}

/** The leases hash's fields other than its two counts. */
async function deliveryFields(): Promise<string[]> {
  return (await redis.plain.hkeys(`${Q}.leases`)).filter((f) => f !== "live" && f !== "completed");
}

describe("a watchdog pass", () => {
  it("recovers a backlog of many calls' worth, equal values among them, each once and counted once", async () => {
    // 181 distinct values and 120 copies of one: 301 claims, six calls and a partial seventh.
    const payloads = [...Array.from({ length: 181 }, (_, i) => `render ${i}`), ...Array<string>(120).fill("same frame")];
    const { lease, held } = await leaseAndStall(payloads);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(301);

    await clock.advance(MIN_IDLE_MS + 1);
    const pass = await sy.app.queues.watchdog.pass();
    expect(pass).toMatchObject({ recovered: 301, deadLettered: 0 });

    const back = (await redis.plain.lrangeBuffer(Q, 0, -1)).map(decodeItem);
    expect(back.map((i) => Buffer.from(i.payload).toString()).sort()).toEqual([...payloads].sort());
    expect(back.every((i) => i.deliveries === 1)).toBe(true);
    expect(new Set(back.map((i) => i.id)).size).toBe(301);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(0);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    // No delivery, value claim ("m:") or count of equal values ("n:") is left behind.
    expect(await deliveryFields()).toEqual([]);
    expect(await redis.plain.hget(`${Q}.leases`, "live")).toBe("0");

    // A second pass finds nothing; the stalled holder's late acks are refused as superseded.
    expect(await sy.app.queues.watchdog.pass()).toMatchObject({ recovered: 0, deadLettered: 0 });
    for (const d of [held[0], held[180], held[181], held[300]]) {
      await expect(sy.client.ack(d.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
    }
    expect(await redis.plain.llen(Q)).toBe(301);
    await lease.cancel();
    await lease.ended;
  });

  it("fails whole when its calls fail, leaving every claim to the next pass", async () => {
    const { lease } = await leaseAndStall(Array.from({ length: 130 }, (_, i) => `job ${i}`));
    await clock.advance(MIN_IDLE_MS + 1);
    // The queue key holds a string: every recover call is refused before it writes.
    await redis.plain.set(Q, "not a list");
    await expect(sy.app.queues.watchdog.pass()).rejects.toThrow(/not a list|WRONGTYPE|holds a string/i);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(130);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(130);

    await redis.plain.del(Q);
    expect(await sy.app.queues.watchdog.pass()).toMatchObject({ recovered: 130 });
    expect(await redis.plain.llen(Q)).toBe(130);
    expect(await deliveryFields()).toEqual([]);
    await lease.cancel();
    await lease.ended;
  });
});
