/**
 * A key of a queue replaced by a value of another type (a stray SET by another
 * Redis client) makes a script that puts an item back fail. Redis keeps the
 * writes a script made before its error, so each such script checks the keys it
 * will write first: nothing is moved, the caller gets FAILED_PRECONDITION
 * WRONG_KEY_TYPE naming the key, and the item is still there once the key is fixed.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { errorDetails, errorReason } from "../../src/client/errors.js";
import type { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { queueKeys } from "../../src/redis/keys.js";
import { keysOf } from "../../src/queue/declaration.js";
import { settleItems } from "../../src/redis/scripts.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const warnings: { msg?: string; err?: { message?: string } }[] = [];
const t = useSwitchyard({ log: createLogger("warn", (line) => warnings.push(JSON.parse(line) as (typeof warnings)[number])) });
const clock = () => t.sy.clock as ManualClock;
const refusal = (p: Promise<unknown>) => p.then(() => undefined, (e: grpc.ServiceError) => ({ code: e.code, reason: errorReason(e), key: errorDetails(e)?.metadata.key }));

describe("a queue key of another type", () => {
  it("keeps delayed items in their set until the queue key is a list again", async () => {
    const { sy, redis } = t;
    const q = "{wrong-promote}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const [id] = await sy.client.enqueue(q, [{ payload: "later", delayMs: 1000 }]);
    await redis.plain.set(q, "not a list");
    await clock().advance(1000);
    // The mover tried, was refused, and will try again in a second.
    await expect.poll(() => warnings.find((w) => w.msg?.startsWith("could not move due items"))?.err?.message).toContain(`key "${q}" holds a string, not a list`);
    expect(await redis.plain.zcard(`${q}.delayed`)).toBe(1);
    await redis.plain.del(q);
    await clock().advance(1000);
    const lease = sy.client.lease(q, 1);
    expect((await lease.take(1)).map((d) => d.id)).toEqual([id]);
    await lease.close();
  });

  it("refuses a retry that would lose its item, which stays held", async () => {
    const { sy, redis } = t;
    const q = "{wrong-settle}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const [a, b] = await sy.client.enqueue(q, ["a", "b"]);
    const lease = sy.client.lease(q, 2);
    const [da, db] = await lease.take(2);
    await redis.plain.set(q, "not a list");
    expect(await refusal(sy.client.retry(da.leaseToken))).toEqual({ code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", key: q });
    await redis.plain.del(q);
    await redis.plain.set(`${q}.delayed`, "not a sorted set");
    expect(await refusal(sy.client.retry(db.leaseToken, { delayMs: 1000 }))).toEqual({
      code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", key: `${q}.delayed`,
    });
    expect(await redis.plain.llen(`${q}.processing`)).toBe(2);
    await redis.plain.del(`${q}.delayed`);
    await sy.client.retry(da.leaseToken);
    await sy.client.retry(db.leaseToken);
    expect((await lease.take(2)).map((d) => d.id).sort()).toEqual([a, b].sort());
    await lease.close();
  });

  it("keeps a stalled delivery claimed until the watchdog can put its item back", async () => {
    const { sy, redis } = t;
    const q = "{wrong-recover}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: `${q}.claims`, minIdle: { seconds: 1n, nanos: 0 } });
    const [id] = await sy.client.enqueue(q, ["stalled"]);
    const lease = sy.client.lease(q, 1);
    await lease.take(1);
    await redis.plain.set(q, "not a list");
    await clock().advance(2000);
    await expect.poll(() => warnings.find((w) => w.msg === "watchdog pass failed")?.err?.message).toContain(`key "${q}" holds a string, not a list`);
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.zcard(`${q}.claims`)]).toEqual([1, 1]);
    await redis.plain.del(q);
    await clock().advance(2000);
    const other = sy.client.lease(q, 1);
    const [again] = await other.take(1);
    expect([again.id, again.deliveryCount]).toEqual([id, 2]);
    await other.close();
    await lease.close();
  });

  it("refuses to requeue dead letters onto it, keeping them", async () => {
    const { sy, redis } = t;
    const q = "{wrong-requeue}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 1 });
    const [id] = await sy.client.enqueue(q, ["poison"]);
    const lease = sy.client.lease(q, 1);
    const [d] = await lease.take(1);
    expect((await sy.client.retry(d.leaseToken)).deadLettered).toBe(true);
    await redis.plain.set(q, "not a list");
    expect(await refusal(sy.client.requeueDeadLetters(q, "all"))).toEqual({ code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", key: q });
    expect(await redis.plain.llen(`${q}.dead`)).toBe(1);
    await redis.plain.del(q);
    expect(await sy.client.requeueDeadLetters(q, "all")).toBe(1);
    expect((await lease.take(1)).map((x) => x.id)).toEqual([id]);
    await lease.close();
  });

  it.each([
    {
      mode: "RELIABLE", q: "{wrong-stats}",
      spec: { mode: QueueMode.RELIABLE, recoverySet: "{wrong-stats}.claims", minIdle: { seconds: 60n } },
      keys: ["", ".processing", ".dead", ".claims", ".leases", ".delayed"],
    },
    { mode: "STREAM", q: "{wrong-stream-stats}", spec: { mode: QueueMode.STREAM, groups: [{ name: "g" }] }, keys: [".dead", ".fence", ".leases"] },
  ])("answers a $mode queue's GetQueueStats with FAILED_PRECONDITION naming a stray key, not INTERNAL, and counts again once it is fixed", async ({ q, spec, keys }) => {
    const { sy, redis } = t;
    await sy.client.createQueue({ name: q, ...spec });
    await sy.client.enqueue(q, ["a"]);
    for (const key of keys.map((suffix) => q + suffix)) {
      const saved = await redis.plain.dumpBuffer(key);
      await redis.plain.del(key);
      await redis.plain.sadd(key, "not what the queue keeps here");
      expect(await refusal(sy.client.getQueueStats(q))).toEqual({ code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", key });
      await redis.plain.del(key);
      if (saved) await redis.plain.restore(key, 0, saved);
    }
    expect((await sy.client.getQueueStats(q)).ready).toBe(1n);
  });

  it("leases nothing while the fence counter holds another type (no item moved without its record), and delivers once it is fixed", async () => {
    const { sy, redis } = t;
    const q = "{wrong-fence}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await redis.plain.hset(`${q}.fence`, "not", "a counter");
    await sy.client.enqueue(q, ["a"]);
    const seen = warnings.length;
    const lease = sy.client.lease(q, 1);
    const failed = () => warnings.slice(seen).find((w) => w.msg === "lease pump failed; retrying");
    await expect.poll(() => failed() !== undefined).toBe(true);
    expect([await redis.plain.llen(q), await redis.plain.llen(`${q}.processing`), await redis.plain.hlen(`${q}.leases`)]).toEqual([1, 0, 0]);
    expect(failed()?.err?.message).toContain(`key "${q}.fence" holds a hash, not a string`);
    await redis.plain.del(`${q}.fence`);
    const [d] = await lease.take(1);
    expect([Buffer.from(d.payload).toString(), d.fence, d.deliveryCount]).toEqual(["a", 1n, 1]);
    await sy.client.ack(d.leaseToken);
    await lease.close();
  });
  it("refuses a settle batch that returns an item while the tombstones set holds another type, whole, and counts it all once fixed", async () => {
    const { sy, redis } = t;
    const q = "{wrong-returned}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(q, ["a", "b"]);
    const lease = sy.client.lease(q, 2);
    await lease.take(2);
    const fields = (await redis.plain.hkeys(`${q}.leases`)).filter((f) => /^\d+@/.test(f)).sort();
    const keys = queueKeys(q, `${q}.processing`, `${q}.dead`, "");
    const ctx = { now: Date.now(), maxDeliveries: 25, retryPolicy: "0,2,600000,0.2", publishTtlMs: 0 };
    const ops = [{ action: "ack" as const, delivery: fields[0] }, { action: "return" as const, delivery: fields[1] }];
    await redis.plain.set(`${q}.returned`, "not a sorted set");
    // An ack before a return: were the tombstone's write to fail after the ack applied, its count would be lost.
    await expect(settleItems(sy.app.redis.client, keys, ctx, ops)).rejects.toMatchObject({ reason: "WRONG_KEY_TYPE", metadata: { key: `${q}.returned` } });
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([2, "2"]);
    await redis.plain.del(`${q}.returned`);
    expect((await settleItems(sy.app.redis.client, keys, ctx, ops)).map((r) => r.code)).toEqual(["done", "done"]);
    const stats = await sy.client.getQueueStats(q);
    expect([stats.ready, stats.processing, stats.completedTotal, await redis.plain.hget(`${q}.leases`, "live")]).toEqual([1n, 0n, 1n, "0"]);
    await lease.close();
  });

  it("keeps stalled deliveries claimed and counted while the tombstones set holds another type, and recovers them once fixed", async () => {
    const { sy, redis } = t;
    const q = "{wrong-recover-returned}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: `${q}.claims`, minIdle: { seconds: 1n, nanos: 0 } });
    await sy.client.enqueue(q, ["a", "b"]);
    const lease = sy.client.lease(q, 2);
    await lease.take(2);
    await redis.plain.set(`${q}.returned`, "not a sorted set");
    const seen = warnings.length;
    await clock().advance(2000);
    await expect.poll(() => warnings.slice(seen).find((w) => w.msg === "watchdog pass failed")?.err?.message).toContain(`key "${q}.returned" holds a string, not a sorted set`);
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.zcard(`${q}.claims`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([2, 2, "2"]);
    await redis.plain.del(`${q}.returned`);
    await clock().advance(2000);
    await expect.poll(() => redis.plain.llen(q)).toBe(2);
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([0, "0"]);
    await lease.close();
  });

  it("keeps stalled deliveries claimed while the leases hash holds another type, and recovers them once fixed", async () => {
    const { sy, redis } = t;
    const q = "{wrong-recover-leases}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: `${q}.claims`, minIdle: { seconds: 1n, nanos: 0 } });
    await sy.client.enqueue(q, ["a", "b"]);
    const lease = sy.client.lease(q, 2);
    await lease.take(2);
    await redis.plain.rename(`${q}.leases`, `${q}.saved-leases`); // the same slot on a cluster
    await redis.plain.set(`${q}.leases`, "not a hash");
    const seen = warnings.length;
    await clock().advance(2000);
    await expect.poll(() => warnings.slice(seen).find((w) => w.msg === "watchdog pass failed")?.err?.message).toContain(`key "${q}.leases" holds a string, not a hash`);
    // The claims stay: once the hash is back, the watchdog finds them (an emptied set would leave the items in processing for good).
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.zcard(`${q}.claims`)]).toEqual([2, 2]);
    await redis.plain.del(`${q}.leases`);
    await redis.plain.rename(`${q}.saved-leases`, `${q}.leases`);
    await clock().advance(2000);
    await expect.poll(() => redis.plain.llen(q)).toBe(2);
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([0, "0"]);
    await lease.close();
  });

  it("refuses a settle batch while the fence counter holds a string that is no integer, whole, and settles once it is fixed", async () => {
    const { sy, redis } = t;
    const q = "{wrong-fence-value}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(q, ["a"]);
    const lease = sy.client.lease(q, 1);
    const [d] = await lease.take(1);
    const fence = await redis.plain.get(`${q}.fence`);
    await redis.plain.set(`${q}.fence`, "junk");
    // A return of the held delivery beside a settle of one never issued: the batch is refused before either applies.
    const keys = keysOf(sy.app.queues.registry.cached(q)!);
    const ctx = { now: clock().now(), maxDeliveries: 0, retryPolicy: "0,2,1000,0", publishTtlMs: 0 };
    const field = (await redis.plain.hkeys(keys.leases)).find((f) => f.startsWith(`${d.fence}@`))!;
    await expect(settleItems(sy.app.redis.client, keys, ctx, [
      { action: "return", delivery: field },
      { action: "ack", delivery: `${Number(d.fence) + 1}@nobody0000` },
    ])).rejects.toMatchObject({ code: "failed_precondition", reason: "WRONG_KEY_TYPE", metadata: { key: `${q}.fence` } });
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([1, "1"]);
    expect(await refusal(sy.client.ack(d.leaseToken))).toEqual({ code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", key: `${q}.fence` });
    await redis.plain.set(`${q}.fence`, fence!);
    await sy.client.ack(d.leaseToken);
    expect([await redis.plain.llen(`${q}.processing`), await redis.plain.hget(`${q}.leases`, "live")]).toEqual([0, "0"]);
    await lease.close();
  });
});
