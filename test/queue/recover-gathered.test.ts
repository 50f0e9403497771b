/**
 * recover.lua writes its put-backs and tombstones once at the end of its call,
 * one command per destination in chunks of at most 1,000 arguments. Driven
 * directly against a real Redis: one call of 2,400 stale claims, half of them
 * at their last delivery, must leave what writing each item in turn left: the
 * queue in claim order (each pushed at the front end), the dead letters in
 * reverse claim order, every item's history, every fence tombstoned at the
 * call's time, the queue's expiry, and the delayed set's due times.
 */
import { describe, expect, it } from "vitest";
import { keysOf, normalizeConfig } from "../../src/queue/declaration.js";
import { decodeItem, encodeItem } from "../../src/queue/envelope.js";
import { leaseItems, policyArg, recoverStale } from "../../src/redis/scripts.js";
import { scriptedRedis } from "../helpers/redis.js";

const MIN_IDLE_MS = 1000;
const MAX_DELIVERIES = 3;
const ITEMS = 2400;
const REASON = "not settled within min_idle (1 s): recovered by the watchdog";
const config = normalizeConfig({
  name: "{scans}", mode: "reliable", processingList: "{scans}.processing", deadLetterList: "{scans}.dead",
  recoverySet: "{scans}.claims", minIdleMs: MIN_IDLE_MS, maxDeliveries: MAX_DELIVERIES,
});
const keys = keysOf(config);

const db = scriptedRedis();

const recover = (now: number, policy: { initialMs: number; multiplier: number; maxMs: number; jitter: number }, publishTtlMs = 0) =>
  recoverStale(db.client, keys, {
    now, minIdleMs: MIN_IDLE_MS, limit: ITEMS, maxDeliveries: MAX_DELIVERIES, retryPolicy: policyArg(policy), publishTtlMs, reason: REASON,
  });
const noWait = { initialMs: 0, multiplier: 1, maxMs: 0, jitter: 0 };

/**
 * ITEMS items, each leased and recovered once, and the half taken first leased and recovered once
 * more; then all leased again at `now` and left stale. Resolves to the stale claims in the order
 * recover.lua takes them, each with its delivery's fence and how many deliveries it has had.
 */
async function staleClaims(now: number): Promise<{ member: Buffer; fence: number; deliveries: number }[]> {
  const values = Array.from({ length: ITEMS }, (_, i) => encodeItem(`item-${String(i).padStart(4, "0")}`, Buffer.from(`scan ${i}`), {}, 1_000 + i));
  await db.client.rpush(keys.queue, ...values);
  await leaseItems(db.client, keys, { now: 0, max: ITEMS, recoveryTtlMs: 0, owner: "gone" });
  expect((await recover(2 * MIN_IDLE_MS, noWait)).recovered).toBe(ITEMS);
  await leaseItems(db.client, keys, { now: 3 * MIN_IDLE_MS, max: ITEMS / 2, recoveryTtlMs: 0, owner: "gone" });
  expect((await recover(5 * MIN_IDLE_MS, noWait)).recovered).toBe(ITEMS / 2);
  const leased = await leaseItems(db.client, keys, { now, max: ITEMS, recoveryTtlMs: 0, owner: "gone" });
  expect(leased).toHaveLength(ITEMS);
  const fences = new Map(leased.map((l) => [l.value.toString("latin1"), l.fence]));
  const members = await db.client.zrangebyscoreBuffer(keys.recovery, "-inf", "+inf");
  return members.map((member) => ({
    member, fence: fences.get(member.toString("latin1"))!, deliveries: decodeItem(member).deliveries + 1,
  }));
}

describe("recover.lua's gathered writes", () => {
  it("leave the queue, dead letters, histories and tombstones as writing each item in turn did", async () => {
    const now = 10 * MIN_IDLE_MS;
    const claims = await staleClaims(now);
    const dead = claims.filter((c) => c.deliveries >= MAX_DELIVERIES);
    const back = claims.filter((c) => c.deliveries < MAX_DELIVERIES);
    // Both destinations get more than one command's worth (1,000 arguments), and so do the tombstones.
    expect(dead).toHaveLength(ITEMS / 2);
    expect(back).toHaveLength(ITEMS / 2);

    const ttlMs = 600_000;
    const r = await recover(now + MIN_IDLE_MS, noWait, ttlMs);
    expect(r).toEqual({ recovered: ITEMS / 2, deadLettered: ITEMS / 2, seen: ITEMS, earliestDueMs: 0 });

    const same = (stored: Buffer[], expected: typeof claims) => {
      expect(stored).toHaveLength(expected.length);
      stored.forEach((value, i) => {
        const was = decodeItem(expected[i].member);
        const item = decodeItem(value);
        expect({ id: item.id, payload: item.payload, deliveries: item.deliveries, lastError: item.lastError })
          .toEqual({ id: was.id, payload: was.payload, deliveries: expected[i].deliveries, lastError: REASON });
      });
    };
    // Each put back at the front end (RPUSH) in claim order; each dead letter LPUSHed in claim order.
    same(await db.client.lrangeBuffer(keys.queue, 0, -1), back);
    same(await db.client.lrangeBuffer(keys.deadLetter, 0, -1), [...dead].reverse());
    expect(await db.client.llen(keys.processing)).toBe(0);
    expect(await db.client.zcard(keys.recovery)).toBe(0);
    const left = (await db.client.hkeys(keys.leases)).filter((f) => f !== "live" && f !== "completed");
    expect(left).toEqual([]);
    expect(await db.client.hget(keys.leases, "live")).toBe("0");

    // Every fence of the call tombstoned at its time; the queue's expiry set once for the call.
    const scores = await db.client.zmscore(keys.returned, ...claims.map((c) => String(c.fence)));
    expect(scores).toEqual(claims.map(() => String(now + MIN_IDLE_MS)));
    const pttl = await db.client.pttl(keys.queue);
    expect(pttl).toBeGreaterThan(ttlMs - 60_000);
    expect(pttl).toBeLessThanOrEqual(ttlMs);
  });

  it("put items with a wait into the delayed set, due at the call's time plus their wait", async () => {
    const now = 10 * MIN_IDLE_MS;
    const claims = await staleClaims(now);
    const back = claims.filter((c) => c.deliveries < MAX_DELIVERIES);
    const policy = { initialMs: 5_000, multiplier: 2, maxMs: 60_000, jitter: 0 };
    const at = now + MIN_IDLE_MS;
    const r = await recover(at, policy);
    // Every item that goes back has had two deliveries: its wait is 5 s × 2.
    expect(r).toEqual({ recovered: ITEMS / 2, deadLettered: ITEMS / 2, seen: ITEMS, earliestDueMs: at + 10_000 });
    expect(await db.client.llen(keys.queue)).toBe(0);
    const delayed = await db.client.zrangeBuffer(keys.delayed, 0, -1, "WITHSCORES");
    expect(delayed).toHaveLength(2 * back.length);
    for (let i = 0; i < delayed.length; i += 2) {
      expect(decodeItem(delayed[i]).deliveries).toBe(2);
      expect(Number(delayed[i + 1])).toBe(at + 10_000);
    }
    expect(await db.client.llen(keys.deadLetter)).toBe(ITEMS / 2);
  });
});
