/**
 * A push onto a reliable queue whose pump would lease now carries that lease
 * (push-lease.lua): the item pushed onto an empty queue with a waiting worker
 * is leased in the Enqueue's own Redis call, not by a second one sent behind
 * it. What must not change: a push Redis refuses writes and leases nothing; a
 * lease that fails after its push leaves the push standing (the Enqueue
 * succeeds, the item waits in the queue and is delivered once the fault is
 * fixed); each item is delivered once, in order. And no lease goes out while
 * the pump reconciles (it would give the new delivery back as nobody's).
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import { errorReason } from "../../src/client/errors.js";
import type { LeaseSession } from "../../src/client/client.js";
import type { QueueConfig } from "../../src/queue/declaration.js";
import type { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { monitorNode } from "../helpers/redis.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

/**
 * Watches the commands clients send to the node holding `key` that name it, as
 * Redis runs them (MONITOR: those a script calls are left out), but for the
 * pump's blocking wake-up.
 */
async function commandsNaming(key: string): Promise<{ sent: string[][]; stop(): void }> {
  const sent: string[][] = [];
  const monitor = await monitorNode(t.redis.nodeFor(key), ({ source, args }) => {
    if (source !== "lua" && args.includes(key) && args[0].toLowerCase() !== "blmove") sent.push(args);
  });
  return { sent, stop: monitor.stop };
}

const text = (ds: Delivery[]) => ds.map((d) => Buffer.from(d.payload).toString());
const refusal = (p: Promise<unknown>) => p.then(() => undefined, (e: grpc.ServiceError) => ({ code: e.code, reason: errorReason(e), details: e.details }));

async function reliable(name: string): Promise<void> {
  await t.sy.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: durationFromMs(60_000) });
}

/** The lease stream of this instance's dispatcher for `name` has opened and its pump waits for items. */
async function waiting(name: string): Promise<QueueDispatcher> {
  const dispatchers = (t.sy.app.queues as unknown as { dispatchers: Map<string, QueueDispatcher> }).dispatchers;
  await expect.poll(() => (dispatchers.get(name) as unknown as { wake?: unknown } | undefined)?.wake !== undefined).toBe(true);
  return dispatchers.get(name)!;
}

/** The one delivery `lease` gets next, acked; resolves once `name` counts it completed (the only item it completed). */
async function ackedNext(name: string, lease: LeaseSession): Promise<Delivery> {
  const [d] = await lease.take(1);
  lease.ack(d.leaseToken);
  await expect.poll(async () => (await t.sy.client.getQueueStats(name)).completedTotal).toBe(1n);
  return d;
}

describe("a push onto a reliable queue with a waiting worker", () => {
  it("leases in the same call: one Redis command per enqueue, each item delivered once with count 1, in order", async () => {
    const { sy } = t;
    const Q = "{push-lease}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 1);
    await waiting(Q);
    const got: Delivery[] = [];
    const commands = await commandsNaming(Q);
    try {
      for (const p of ["a", "b", "c", "d"]) {
        commands.sent.length = 0;
        await sy.client.enqueue(Q, [p]);
        const [d] = await lease.take(1);
        // The Enqueue's push-lease.lua, and nothing else: no LPUSH, no lease.lua behind it.
        // (The first may find Redis without the script, and load it with EVAL.)
        await expect.poll(() => commands.sent.length).toBeGreaterThan(0);
        expect(commands.sent.map((c) => c[0].toLowerCase())).toEqual(p === "a" && commands.sent.length === 2 ? ["evalsha", "eval"] : ["evalsha"]);
        got.push(d);
        lease.ack(d.leaseToken);
        await expect.poll(async () => (await sy.client.getQueueStats(Q)).processing).toBe(0n);
        await waiting(Q);
      }
    } finally {
      commands.stop();
    }
    expect(text(got)).toEqual(["a", "b", "c", "d"]);
    expect(got.every((d) => d.deliveryCount === 1)).toBe(true);
    expect(new Set(got.map((d) => d.fence)).size).toBe(4);
    const stats = await sy.client.getQueueStats(Q);
    expect([stats.ready, stats.processing, stats.leasedTotal, stats.completedTotal]).toEqual([0n, 0n, 4n, 4n]);
    await lease.close();
  });

  it("leases no more than the open credit; the rest wait in the queue, in order, and come as credit frees", async () => {
    const { sy, redis } = t;
    const Q = "{push-lease-credit}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 2);
    await waiting(Q);
    await sy.client.enqueue(Q, ["a", "b", "c", "d", "e"]);
    const first = await lease.take(2);
    expect(text(first)).toEqual(["a", "b"]);
    expect(await redis.plain.llen(Q)).toBe(3);
    first.forEach((d) => lease.ack(d.leaseToken));
    const rest = await lease.take(2);
    rest.forEach((d) => lease.ack(d.leaseToken));
    rest.push(...(await lease.take(1)));
    lease.ack(rest[2].leaseToken);
    expect(text(rest)).toEqual(["c", "d", "e"]);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).completedTotal).toBe(5n);
    await lease.close();
  });

  it("keeps the order of many single-item Enqueues in flight at once, each delivered once", async () => {
    const { sy } = t;
    const Q = "{push-lease-many}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 3);
    await waiting(Q);
    const payloads = Array.from({ length: 300 }, (_, i) => `item-${i}`);
    // Sent in this order on one client: the server pushes them in it.
    const enqueued = Promise.all(payloads.map((p) => sy.client.enqueue(Q, [p])));
    const got: Delivery[] = [];
    while (got.length < payloads.length) {
      const ds = await lease.take(1);
      got.push(...ds);
      ds.forEach((d) => lease.ack(d.leaseToken));
    }
    await enqueued;
    expect(text(got)).toEqual(payloads);
    expect(new Set(got.map((d) => d.fence)).size).toBe(payloads.length);
    expect(got.every((d) => d.deliveryCount === 1)).toBe(true);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).completedTotal).toBe(300n);
    await lease.close();
  });

  it("that Redis refuses (the queue key of another type) writes nothing and leases nothing; the worker gets the next item", async () => {
    const { sy, redis } = t;
    const Q = "{push-lease-refused}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 1);
    await waiting(Q);
    await redis.plain.set(Q, "not a list");
    expect(await refusal(sy.client.enqueue(Q, ["lost"]))).toEqual({
      code: grpc.status.FAILED_PRECONDITION, reason: "WRONG_KEY_TYPE", details: expect.stringContaining(`key "${Q}" holds a string, not a list`),
    });
    expect(await redis.plain.get(Q)).toBe("not a list");
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await redis.plain.del(Q);
    await sy.client.enqueue(Q, ["next"]);
    const d = await ackedNext(Q, lease);
    expect([Buffer.from(d.payload).toString(), d.deliveryCount]).toEqual(["next", 1]);
    await lease.close();
  });

  it("whose lease fails after the push (the fence counter of another type) succeeds: the item waits, and is delivered once the key is fixed", async () => {
    const { sy, redis } = t;
    const Q = "{push-lease-fence}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 1);
    await waiting(Q);
    await redis.plain.hset(`${Q}.fence`, "x", "1");
    const [id] = await sy.client.enqueue(Q, ["kept"]);
    expect(await redis.plain.llen(Q)).toBe(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await redis.plain.del(`${Q}.fence`);
    const d = await ackedNext(Q, lease);
    expect([d.id, Buffer.from(d.payload).toString(), d.deliveryCount]).toEqual([id, "kept", 1]);
    expect(await redis.plain.llen(Q)).toBe(0);
    await lease.close();
  });

  it("loads its script when Redis has lost it (SCRIPT FLUSH) and still delivers", async () => {
    const { sy, redis } = t;
    const Q = "{push-lease-noscript}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 1);
    await waiting(Q);
    await redis.nodeFor(Q).script("FLUSH");
    await sy.client.enqueue(Q, ["after flush"]);
    const d = await ackedNext(Q, lease);
    expect(Buffer.from(d.payload).toString()).toBe("after flush");
    await lease.close();
  });

  it("is refused whole while Redis is out of memory; the worker gets the items pushed once it is not", async () => {
    const { sy, redis } = t;
    const Q = "{push-lease-oom}";
    await reliable(Q);
    const lease = sy.client.lease(Q, 1);
    await waiting(Q);
    const node = redis.nodeFor(Q);
    await node.config("SET", "maxmemory-policy", "noeviction");
    await node.config("SET", "maxmemory", "1");
    try {
      const refused = await sy.client.enqueue(Q, ["refused"]).then(() => undefined, (e: grpc.ServiceError) => e);
      expect(refused).toBeDefined();
      expect(refused!.message).toMatch(/OOM/);
    } finally {
      await node.config("SET", "maxmemory", "0");
    }
    expect(await redis.plain.llen(Q)).toBe(0);
    await sy.client.enqueue(Q, ["accepted"]);
    const d = await ackedNext(Q, lease);
    expect([Buffer.from(d.payload).toString(), d.deliveryCount]).toEqual(["accepted", 1]);
    await lease.close();
  });
});

describe("a pump that reconciles", () => {
  it("sends no lease beside a push (nor beside a settle: the same check) until the reconcile has ended", async () => {
    const { sy, redis } = t;
    const Q = "{reconcile-window}";
    await reliable(Q);
    const queues = t.sy.app.queues as unknown as { reconcile(config: QueueConfig): Promise<void> };
    const reconcile = queues.reconcile.bind(queues);
    let release!: () => void;
    const gate = new Promise<void>((ok) => (release = ok));
    let reconciling = false;
    queues.reconcile = async (config) => {
      reconciling = true;
      await gate;
      return reconcile(config);
    };
    try {
      const lease = sy.client.lease(Q, 2);
      const dispatcher = await waiting(Q);
      // As after a reconnect: the pump reconciles before it leases again, once its wait ends.
      dispatcher.markUnsure();
      await sy.client.enqueue(Q, ["first"]);
      await expect.poll(() => reconciling).toBe(true);
      // Pushed while the reconcile runs: the push goes alone, and the item waits in the queue.
      await sy.client.enqueue(Q, ["second"]);
      expect(await redis.plain.llen(Q)).toBe(2);
      expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
      release();
      const got = await lease.take(2);
      expect(text(got)).toEqual(["first", "second"]);
      expect(got.every((d) => d.deliveryCount === 1)).toBe(true);
      got.forEach((d) => lease.ack(d.leaseToken));
      await expect.poll(async () => (await sy.client.getQueueStats(Q)).completedTotal).toBe(2n);
      expect(await redis.plain.llen(Q)).toBe(0);
      await lease.close();
    } finally {
      release();
      delete (queues as { reconcile?: unknown }).reconcile;
    }
  });
});
