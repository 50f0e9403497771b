/**
 * Redis Cluster only (`npm run test:cluster`): queues on different hash tags
 * spread over the masters; a busy queue's slot moves between masters while
 * a producer enqueues and a worker leases and acks (MOVED, ASK and TRYAGAIN on
 * the way), losing and duplicating nothing; and the batch scripts finish what
 * they start while their slot migrates.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Cluster } from "ioredis";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { queueKeys, slotOf, type QueueKeys } from "../../src/redis/keys.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { defineScripts, leaseItems, recoverStale, settleItems } from "../../src/redis/scripts.js";
import { ownerOf, type ClusterMaster } from "../helpers/cluster.js";
import { leaseRecords, liveDeliveries, onCluster, startClusterRedis, type ClusterRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const UNAVAILABLE = 14;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Calls `fn` again while it fails with UNAVAILABLE (retriable, as the README says), at most 50 times. */
async function retrying<T>(fn: () => Promise<T>, retries: { count: number }): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if ((err as { code?: number }).code !== UNAVAILABLE || attempt >= 50) throw err;
      retries.count++;
      await sleep(20 * attempt);
    }
  }
}

const servedBy = (masters: ClusterMaster[], key: string) => ownerOf(masters, slotOf(key))!;

/** How often the masters answered ASK or TRYAGAIN so far (INFO errorstats). */
async function redirections(redis: ClusterRedis): Promise<{ ask: number; tryagain: number }> {
  const total = { ask: 0, tryagain: 0 };
  for (const node of redis.plain.nodes("master")) {
    const stats = String(await node.info("errorstats"));
    total.ask += Number(/errorstat_ASK:count=(\d+)/.exec(stats)?.[1] ?? 0);
    total.tryagain += Number(/errorstat_TRYAGAIN:count=(\d+)/.exec(stats)?.[1] ?? 0);
  }
  return total;
}

describe.runIf(onCluster)("on a Redis Cluster", () => {
  let redis: ClusterRedis;
  let sy: TestSwitchyard;
  beforeAll(async () => {
    redis = await startClusterRedis();
    sy = await startSwitchyard(redis);
  });
  afterAll(async () => {
    await sy?.stop();
    await redis?.stop();
  });

  it("spreads queues with different hash tags over every master, and each works", async () => {
    const names = Array.from({ length: 9 }, (_, i) => `{tenant-${i}}`);
    const masters = await redis.cluster.masters();
    expect(new Set(names.map((n) => servedBy(masters, n).id)).size).toBe(3);
    for (const name of names) {
      await sy.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });
      const ids = await sy.client.enqueue(name, ["a", "b"]);
      const lease = sy.client.lease(name, 2);
      const got = await lease.take(2);
      expect(got.map((d) => d.id)).toEqual(ids);
      // All of the queue's keys sit on the master that serves its tag.
      const owner = redis.nodeFor(name);
      expect(owner.options.port).toBe(servedBy(masters, name).node.port);
      expect([await owner.llen(`${name}.processing`), await owner.zcard(`${name}.claims`), await liveDeliveries(owner, `${name}.leases`)]).toEqual([2, 2, 2]);
      for (const d of got) await sy.client.ack(d.leaseToken);
      expect(await sy.client.getQueueStats(name)).toMatchObject({ ready: 0n, processing: 0n });
      await lease.close();
    }
  });

  it("loses and duplicates nothing while a busy queue's slot moves between masters", { timeout: 60_000 }, async () => {
    const Q = "{reshard}";
    const slot = slotOf(Q);
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const before = await redirections(redis);
    const retries = { count: 0 };

    // The producer: batches of 5 until told to stop; an id counts once Enqueue answered.
    const enqueued = new Set<string>();
    let producing = true;
    const producer = (async () => {
      for (let batch = 0; producing && batch < 5000; batch++) {
        const payloads = Array.from({ length: 5 }, (_, i) => `item-${batch}-${i}`);
        for (const id of await retrying(() => sy.client.enqueue(Q, payloads), retries)) enqueued.add(id);
        await sleep(5);
      }
    })();

    const deliveries = new Map<string, number>();
    const delivered = (d: { id: string }) => deliveries.set(d.id, (deliveries.get(d.id) ?? 0) + 1);
    const refused: { code: number; message: string }[] = [];
    // A slow worker holds two long jobs throughout, so the queue's processing list and leases stay.
    const slow = sy.client.lease(Q, 2);
    const held = await slow.take(2);
    slow.setCredit(0);
    held.forEach(delivered);
    // The worker, faster than the producer: credit 16, most items acked on the stream, every
    // fourth by the unary Ack; a settle refused as UNAVAILABLE is sent again.
    const session = sy.client.lease(Q, 16);
    session.onSettleResult((r) => {
      if (r.code === UNAVAILABLE && retries.count++ < 1000) session.ack(r.leaseToken);
      else refused.push({ code: r.code, message: r.message });
    });
    const worker = (async () => {
      let n = 0;
      for await (const d of session) {
        delivered(d);
        if (++n % 4 === 0) await retrying(() => sy.client.ack(d.leaseToken), retries);
        else session.ack(d.leaseToken);
      }
    })();

    // Move the queue's slot around all three masters, key by key, while both run.
    await expect.poll(() => enqueued.size, { timeout: 10_000 }).toBeGreaterThan(200);
    const masters = await redis.cluster.masters();
    const start = servedBy(masters, Q);
    const route = [...masters.filter((m) => m.id !== start.id), start];
    const moved: number[] = [];
    for (const to of route) {
      const migration = await redis.cluster.migrateSlot(slot, to);
      await sleep(50);
      moved.push(await migration.finish(50));
      await sleep(300);
    }
    producing = false;
    await producer;
    for (const d of held) await retrying(() => sy.client.ack(d.leaseToken), retries);

    // Everything enqueued is delivered once and acked: the queue's lists and leases drain.
    const left = async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`), await liveDeliveries(redis.plain, `${Q}.leases`)];
    await expect.poll(left, { timeout: 20_000 }).toEqual([0, 0, 0]);
    await Promise.all([session.close(), slow.close()]);
    await worker;

    const twice = [...deliveries].filter(([, n]) => n > 1);
    const unknown = [...deliveries.keys()].filter((id) => !enqueued.has(id));
    const missing = [...enqueued].filter((id) => !deliveries.has(id));
    expect({ twice, unknown, missing, refused }).toEqual({ twice: [], unknown: [], missing: [], refused: [] });
    expect(enqueued.size).toBeGreaterThan(200);
    expect(await leaseRecords(redis.plain, `${Q}.leases`)).toEqual([]);
    // The slot really moved, with the queue's keys, and came back to where it started.
    expect(moved.every((n) => n > 0), `keys moved per step: ${moved}`).toBe(true);
    expect(servedBy(await redis.cluster.masters(), Q).id).toBe(start.id);
    // And the clients met the migration: the masters answered ASK (or TRYAGAIN) meanwhile.
    const after = await redirections(redis);
    expect(after.ask + after.tryagain - before.ask - before.tryagain).toBeGreaterThan(0);
    console.log(`resharding: ${enqueued.size} items, keys moved per step ${moved.join("/")}, ` +
      `ASK ${after.ask - before.ask}, TRYAGAIN ${after.tryagain - before.tryagain}, client retries ${retries.count}`);
  });

  it("answers UNAVAILABLE while a queue's slot stays half moved, and takes the same ack once it has moved", async () => {
    const Q = "{half-moved}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["x", "y"]);
    const lease = sy.client.lease(Q, 1);
    const [d] = await lease.take(1);
    lease.setCredit(0);
    const masters = await redis.cluster.masters();
    const migration = await redis.cluster.migrateSlot(slotOf(Q), masters.find((m) => m.id !== servedBy(masters, Q).id)!);
    await migration.move(`${Q}.fence`); // the queue's keys are on two masters now: TRYAGAIN until the move ends
    const unary = await sy.client.ack(d.leaseToken).then(() => "OK", (e: { code: number }) => e.code);
    const streamed = new Promise<number>((ok) => lease.onSettleResult((r) => ok(r.code)));
    lease.ack(d.leaseToken);
    expect([unary, await streamed]).toEqual([UNAVAILABLE, UNAVAILABLE]);
    expect(await sy.client.enqueue(Q, ["z"])).toHaveLength(1); // one key: served wherever the queue list is
    await migration.finish();
    await sy.client.ack(d.leaseToken);
    expect([await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([2, 0]);
    await lease.close();
  });

  it("serves an Enqueue for a waiting worker while the queue's slot migrates: the push goes alone, and the item comes once the slot has moved", async () => {
    const Q = "{migrating-push}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: { seconds: 60n } });
    // One item leased and acked: the fence counter and leases hash exist, the queue and processing lists do not.
    await sy.client.enqueue(Q, ["warm"]);
    const lease = sy.client.lease(Q, 1);
    const [warm] = await lease.take(1);
    lease.ack(warm.leaseToken);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).completedTotal).toBe(1n);
    // The pump waits for items with the stream's credit free: an Enqueue would carry its lease (push-lease.lua).
    const dispatchers = (sy.app.queues as unknown as { dispatchers: Map<string, { wake?: unknown }> }).dispatchers;
    await expect.poll(() => dispatchers.get(Q)?.wake !== undefined).toBe(true);
    const masters = await redis.cluster.masters();
    const migration = await redis.cluster.migrateSlot(slotOf(Q), masters.find((m) => m.id !== servedBy(masters, Q).id)!);
    // MIGRATING, every key still on the old master: a call on keys some of which are missing there is refused
    // (TRYAGAIN), a push onto the list alone is served (by the new master, after ASK: the list did not exist).
    const [id] = await sy.client.enqueue(Q, ["during"]);
    expect(await redis.plain.llen(Q)).toBe(1);
    await migration.finish();
    const [d] = await lease.take(1);
    expect([d.id, Buffer.from(d.payload).toString(), d.deliveryCount]).toEqual([id, "during", 1]);
    lease.ack(d.leaseToken);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).completedTotal).toBe(2n);
    // And the next push carries its lease again.
    const [next] = await sy.client.enqueue(Q, ["after"]);
    expect((await lease.take(1)).map((x) => x.id)).toEqual([next]);
    await lease.close();
  });

  it("a master that hangs (CLIENT PAUSE) fails calls on its queues with UNAVAILABLE within the command timeout, and health follows", async () => {
    const hung = await startSwitchyard(redis, { config: { redisCommandTimeoutMs: 500 } });
    const Q = "{paused}";
    try {
      await hung.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
      await hung.client.enqueue(Q, ["before"]);
      // Every node connection has the timeout and keepalive.
      for (const node of (hung.app.redis.client as Cluster).nodes("all")) expect([node.options.commandTimeout, node.options.keepAlive]).toEqual([500, 10_000]);
      const owner = redis.nodeFor(Q);
      await owner.call("CLIENT", "PAUSE", "2500", "ALL");
      const started = Date.now();
      const code = await hung.client.enqueue(Q, ["during"]).then(() => 0, (e: { code: number }) => e.code);
      expect([code, Date.now() - started < 2000]).toEqual([UNAVAILABLE, true]);
      await expect.poll(() => hung.app.readiness.current ?? "ready").toMatch(/^redis (did not answer PING|PING failed: Command timed out)/);
      await expect.poll(() => hung.app.readiness.current, { timeout: 10_000 }).toBeUndefined();
      expect(await hung.client.enqueue(Q, ["after"])).toHaveLength(1);
    } finally {
      await hung.stop();
    }
  });

  describe("while its slot migrates, every key still on the old master", () => {
    const T0 = Date.UTC(2026, 0, 1);
    beforeAll(() => defineScripts(redis.plain));
    /** Starts moving `key`'s slot to another master; every key of the slot stays where it is until `finish`. */
    async function migrating(key: string) {
      const masters = await redis.cluster.masters();
      const owner = servedBy(masters, key);
      return redis.cluster.migrateSlot(slotOf(key), masters.find((m) => m.id !== owner.id)!);
    }

    const lease = (keys: QueueKeys, max: number) => leaseItems(redis.plain, keys, { now: T0, max, recoveryTtlMs: 0, owner: "mig" });
    const settleCtx = { now: T0, maxDeliveries: 25, retryPolicy: "0,1,0,0", publishTtlMs: 0 };
    /** Creates every key a script names, as a migrating slot requires (else Redis answers TRYAGAIN). */
    async function everyKey(keys: QueueKeys) {
      await redis.plain.lpush(keys.deadLetter, "old");
      await redis.plain.zadd(keys.delayed, T0 + 3_600_000, "later");
      await redis.plain.zadd(keys.returned, T0, "0");
    }

    it("lease.lua moves the fewer items the queue holds than asked for, and records each", async () => {
      const keys = queueKeys("{mig-lease}", "{mig-lease}.processing", "{mig-lease}.dead", "");
      await redis.plain.lpush(keys.queue, "a", "b", "c");
      expect(await lease(keys, 1)).toHaveLength(1); // processing, leases and fence exist
      const migration = await migrating(keys.queue);
      // Emptying the queue must not end the script halfway, with items moved but not handed out.
      const items = await lease(keys, 10);
      expect(items.map((i) => i.value.toString())).toEqual(["b", "c"]);
      await migration.finish();
      expect([await redis.plain.llen(keys.processing), await redis.plain.hget(keys.leases, "live")]).toEqual([3, "3"]);
    });

    it("settle.lua applies a whole batch, also a stale settle after the last delivery is gone", async () => {
      const keys = queueKeys("{mig-settle}", "{mig-settle}.processing", "{mig-settle}.dead", "");
      await redis.plain.lpush(keys.queue, "a", "b", "c");
      await everyKey(keys);
      const [c, b] = await lease(keys, 2);
      const migration = await migrating(keys.queue);
      const results = await settleItems(redis.plain, keys, settleCtx, [
        { action: "ack", delivery: `${c.fence}@mig` },
        { action: "ack", delivery: `${b.fence}@mig` },
        { action: "check", delivery: `${c.fence}@mig` }, // a late check: no delivery is live by now
      ]);
      expect(results.map((r) => r.code)).toEqual(["done", "done", "not_held"]);
      await migration.finish();
      expect([await redis.plain.llen(keys.processing), await redis.plain.hget(keys.leases, "live"), await redis.plain.llen(keys.queue)]).toEqual([0, "0", 1]);
    });

    it("recover.lua returns every stale claim, also after the processing list empties", async () => {
      const keys = queueKeys("{mig-recover}", "{mig-recover}.processing", "{mig-recover}.dead", "{mig-recover}.claims");
      await redis.plain.lpush(keys.queue, "a", "b");
      await lease(keys, 2);
      await redis.plain.lpush(keys.queue, "keep");
      await everyKey(keys);
      const migration = await migrating(keys.queue);
      const pass = await recoverStale(redis.plain, keys, { ...settleCtx, now: T0 + 60_000, minIdleMs: 1000, limit: 100, reason: "stale" });
      expect(pass).toEqual({ recovered: 2, deadLettered: 0, seen: 2, earliestDueMs: 0 });
      await migration.finish();
      const back = await redis.plain.lrangeBuffer(keys.queue, 0, -1);
      expect(back.map((v) => decodeItem(v)).map((i) => [Buffer.from(i.payload).toString(), i.deliveries, i.lastError])).toEqual([
        ["keep", 0, ""], ["a", 1, "stale"], ["b", 1, "stale"],
      ]);
      expect(await redis.plain.exists(keys.processing, keys.recovery)).toBe(0);
    });

    it("recover.lua has put back what it took when a leases hash another client left without its count empties midway", async () => {
      // The hash empties with its last record; the next claim's read of it fails the call ("non local key").
      const keys = queueKeys("{mig-nolive}", "{mig-nolive}.processing", "{mig-nolive}.dead", "{mig-nolive}.claims");
      await redis.plain.rpush(keys.queue, "queued");
      await redis.plain.lpush(keys.processing, "v1", "v2");
      await redis.plain.hset(keys.leases, "10@a", "d:v1", "11@a", "d:v2");
      await redis.plain.zadd(keys.recovery, 0, "\0SYC10@a", 1, "\0SYC11@a", 2, "stray");
      await everyKey(keys);
      const migration = await migrating(keys.queue);
      await expect(recoverStale(redis.plain, keys, { ...settleCtx, now: T0 + 60_000, minIdleMs: 1000, limit: 100, reason: "stale" }))
        .rejects.toThrow(/non local key/);
      await migration.finish();
      const back = await redis.plain.lrangeBuffer(keys.queue, 0, -1);
      expect(back.map((v) => decodeItem(v)).map((i) => [Buffer.from(i.payload).toString(), i.deliveries])).toEqual([
        ["queued", 0], ["v1", 1], ["v2", 1],
      ]);
      expect(await redis.plain.llen(keys.processing)).toBe(0);
    });
  });
});
