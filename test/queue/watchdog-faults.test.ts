/**
 * The watchdog under faults, driven directly against a real Redis: a recover
 * call whose reply is lost while the call queued behind it runs (a pass keeps
 * one in flight ahead), and a leases hash whose count of equal values ("n:")
 * another client left holding no integer, and delivery fields with odd fences or none.
 */
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { Watchdog, type WatchdogHost } from "../../src/queue/watchdog.js";
import { keysOf, normalizeConfig } from "../../src/queue/declaration.js";
import { adoptOrphans, leaseItems, recoverStale, settleItems } from "../../src/redis/scripts.js";
import { decodeItem } from "../../src/queue/envelope.js";
import type { RedisClient } from "../../src/redis/connection.js";
import { scriptedRedis } from "../helpers/redis.js";

const MIN_IDLE_MS = 1000;
const NOW = 10_000;
const config = normalizeConfig({
  name: "{renders}", mode: "reliable", processingList: "{renders}.processing", deadLetterList: "{renders}.dead",
  recoverySet: "{renders}.claims", minIdleMs: MIN_IDLE_MS, retryPolicy: { initialMs: 0, multiplier: 1, maxMs: 0, jitter: 0 },
});
const keys = keysOf(config);
const nField = (value: string) => `n:${createHash("sha1").update(value).digest("hex")}`;

const db = scriptedRedis();

/** A watchdog of `config` on `redisClient`, its clock at NOW; `recovered` sums what the metrics were told. */
function watchdog(redisClient: RedisClient) {
  const counted = { recovered: 0, deadLettered: 0 };
  const host: WatchdogHost = {
    client: redisClient,
    clock: { now: () => NOW } as WatchdogHost["clock"],
    log: { info() {}, warn() {}, error() {}, debug() {} } as unknown as WatchdogHost["log"],
    metrics: {
      items: (_queue: string, event: string, n = 0) => {
        if (event === "recovered") counted.recovered += n;
        if (event === "dead_lettered") counted.deadLettered += n;
      },
    } as unknown as WatchdogHost["metrics"],
    instances: { beat: async () => {}, claimDead: async () => [] } as unknown as WatchdogHost["instances"],
    settler: {} as WatchdogHost["settler"],
    queues: () => [config],
    delayed: () => {},
  };
  return { watchdog: new Watchdog(host, 3_600_000), counted };
}

/** Pushes `values` and leases them all at time 0 for instance "gone", which never settles. */
async function leaseAll(values: string[]): Promise<void> {
  await db.client.rpush(keys.queue, ...values);
  await leaseItems(db.client, keys, { now: 0, max: values.length, recoveryTtlMs: 0, owner: "gone" });
}

async function deliveryFields(): Promise<string[]> {
  return (await db.client.hkeys(keys.leases)).filter((f) => f !== "live" && f !== "completed");
}

/** Runs one watchdog pass and checks it recovered all `n` items in processing, counted, with no claim left. */
async function passRecoversAll(n: number): Promise<void> {
  const { watchdog: wd, counted } = watchdog(db.client as unknown as RedisClient);
  expect(await wd.pass()).toMatchObject({ recovered: n, deadLettered: 0 });
  expect(counted.recovered).toBe(n);
  expect(await db.client.llen(keys.queue)).toBe(n);
  expect(await db.client.llen(keys.processing)).toBe(0);
  expect(await db.client.zcard(keys.recovery)).toBe(0);
}

describe("a pass whose recover call's reply is lost", () => {
  it.each([1, 2, 3])("counts what the other calls recovered, the one queued behind it too (call %i lost)", async (failAt) => {
    const n = 301; // every third value equal
    await leaseAll(Array.from({ length: n }, (_, i) => (i % 3 === 0 ? "same" : `v${i}`)));
    let calls = 0;
    let lost = 0;
    // The failAt-th call runs in Redis, and its caller is told it timed out.
    const faulty = new Proxy(db.client, {
      get(target, prop) {
        if (prop === "syRecover") {
          return async (...args: unknown[]) => {
            const me = ++calls;
            const r = await (target as unknown as { syRecover(...a: unknown[]): Promise<number[]> }).syRecover(...args);
            if (me === failAt) {
              lost = r[0] + r[1];
              throw new Error("Command timed out");
            }
            return r;
          };
        }
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const { watchdog: wd, counted } = watchdog(faulty as unknown as RedisClient);
    await expect(wd.pass()).rejects.toThrow("Command timed out");
    await wd.pass();
    expect(lost).toBe(50);
    expect(await db.client.llen(keys.queue)).toBe(n);
    expect(await db.client.llen(keys.processing)).toBe(0);
    // Everything recovered was counted, but for the lost call's own.
    expect(counted.recovered).toBe(n - lost);
  });
});

describe("a count of equal values that is no integer", () => {
  it("neither stops a pass nor takes copies out of processing without putting them back", async () => {
    // Ten distinct values and five copies of V: V claims under itself once, under derived members four times.
    await leaseAll([...Array.from({ length: 10 }, (_, i) => `a${i}`), ..."VVVVV"]);
    await db.client.hset(keys.leases, nField("V"), "2.5");
    await passRecoversAll(15);
    expect(await deliveryFields()).toEqual([]);
    expect(await db.client.hget(keys.leases, "live")).toBe("0");
  });

  it("does not fail a lease (its item moved) nor an adoption of items in processing", async () => {
    await db.client.hset(keys.leases, nField("V"), "2.5", nField("W"), "junk");
    await db.client.rpush(keys.queue, "V", "W");
    const leased = await leaseItems(db.client, keys, { now: 0, max: 2, recoveryTtlMs: 0, owner: "me" });
    expect(leased.map((l) => l.value.toString()).sort()).toEqual(["V", "W"]);
    expect(await db.client.hmget(keys.leases, nField("V"), nField("W"))).toEqual(["1", "1"]);

    // A copy moved into processing by another client, under a count left holding junk.
    await db.client.hset(keys.leases, nField("X"), "1e2x");
    await db.client.lpush(keys.processing, "X");
    expect(await adoptOrphans(db.client, keys, NOW, 100)).toMatchObject({ added: 1 });
    expect(await db.client.hget(keys.leases, nField("X"))).toBe("1");
    expect(await db.client.hget(keys.leases, "live")).toBe("3");
  });
});

describe("a delivery field another client wrote with an odd fence, or none", () => {
  const reason = "not settled";
  const back = async () =>
    (await db.client.lrangeBuffer(keys.queue, 0, -1)).map((v) => {
      const item = decodeItem(v);
      return [Buffer.from(item.payload).toString(), item.deliveries, item.lastError];
    });

  it("is retried by settle.lua: its item goes back, not lost halfway", async () => {
    // Records of kind "-" (no claim): "1.5" is a number, "w" none, "-1" one that would never end as
    // a varint (the script ran until Redis was killed); none is a fence a lease writes.
    await db.client.hset(keys.leases, "1.5@w", "-:first", "w", "-:second", "-1@w", "-:third", "live", "3");
    await db.client.rpush(keys.processing, "first", "second", "third");
    await db.client.set(keys.fence, "10");
    const results = await settleItems(db.client, keys, { now: NOW, maxDeliveries: 25, retryPolicy: "0,1,0,0", publishTtlMs: 0 }, [
      { action: "retry", delivery: "1.5@w", reason },
      { action: "retry", delivery: "w", reason },
      { action: "retry", delivery: "-1@w", reason },
    ]);
    expect(results.map((r) => r.code)).toEqual(["done", "done", "done"]);
    // Retried items go to the back of the queue (LPUSH), so the last is leftmost.
    expect(await back()).toEqual([["third", 1, reason], ["second", 1, reason], ["first", 1, reason]]);
    expect(await db.client.llen(keys.processing)).toBe(0);
    expect(await db.client.hget(keys.leases, "live")).toBe("0");
  });

  it("is recovered by recover.lua: its item goes back with fence 0", async () => {
    await db.client.hset(keys.leases, "w", "d:stalled", "live", "1");
    await db.client.rpush(keys.processing, "stalled");
    await db.client.zadd(keys.recovery, 0, "\0SYCw");
    const pass = await recoverStale(db.client, keys, {
      now: NOW, minIdleMs: MIN_IDLE_MS, limit: 50, maxDeliveries: 25, retryPolicy: "0,1,0,0", publishTtlMs: 0, reason,
    });
    expect(pass).toEqual({ recovered: 1, deadLettered: 0, seen: 1, earliestDueMs: 0 });
    expect(await back()).toEqual([["stalled", 1, reason]]);
    expect(await db.client.zrange(keys.returned, 0, -1)).toEqual(["0"]);
    expect(await db.client.hget(keys.leases, "live")).toBe("0");
  });
});

describe("fences past 10^14", () => {
  it("adopts items under records of their own, which the watchdog then recovers", async () => {
    await db.client.set(keys.fence, "99999999999999");
    await db.client.lpush(keys.processing, "Y", "Z");
    expect(await adoptOrphans(db.client, keys, 0, 100)).toMatchObject({ added: 2 });
    expect((await deliveryFields()).filter((f) => f.includes("@")).sort()).toEqual(["100000000000000@-", "100000000000001@-"]);
    await passRecoversAll(2);
  });
});
