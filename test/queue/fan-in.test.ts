/**
 * SPEC Q13: many lease streams on one instance share Redis connections. Waiting
 * streams for one queue are served by one blocking reader per queue per
 * instance, not one Redis connection each; backpressure (Q8) holds for all.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { liveDeliveries, onCluster, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { SwitchyardClient, type LeaseSession } from "../../src/client/client.js";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";

const STREAMS = 1000;
/** Workers are spread over several HTTP/2 connections, as separate processes would be. */
const CLIENTS = 10;
const QUEUE = "{fan}";

let redis: TestRedis;
let sy: TestSwitchyard;
const clients: SwitchyardClient[] = [];
const sessions: LeaseSession[] = [];

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  for (let i = 0; i < CLIENTS; i++) {
    clients.push(new SwitchyardClient(sy.address, { channelOptions: { "grpc.use_local_subchannel_pool": 1 } }));
  }
});
afterAll(async () => {
  sessions.forEach((s) => s.cancel());
  clients.forEach((c) => c.close());
  await sy?.stop();
  await redis?.stop();
});

/** Polls `probe` until it returns a value `done` accepts, or fails after `ms`. */
async function eventually<T>(what: string, probe: () => Promise<T>, done: (v: T) => boolean, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface RedisClientInfo {
  id: string;
  name: string;
  cmd: string;
  flags: string;
  sub: number;
}

/**
 * Every connection to the test's Redis (on a cluster, to any of its nodes) except the
 * plain checking client's own, replication links and ioredis's short-lived slot refreshers.
 */
async function switchyardConnections(): Promise<RedisClientInfo[]> {
  const all: RedisClientInfo[] = [];
  for (const node of redis.nodes()) {
    const self = String(await node.client("ID"));
    const list = String(await node.client("LIST"));
    const clients = list
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => Object.fromEntries(line.trim().split(" ").map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)])))
      .map((f) => ({ id: f.id, name: f.name, cmd: f.cmd, flags: f.flags, sub: Number(f.sub ?? 0) + Number(f.psub ?? 0) }))
      .filter((c) => c.id !== self && !/[MS]/.test(c.flags) && !c.name.includes("(refresher)"));
    all.push(...clients);
  }
  return all;
}

describe("fan-in", () => {
  it("1,000 concurrent lease streams on one queue use a bounded number of Redis connections", { timeout: 60_000 }, async () => {
    await sy.client.createQueue({ name: QUEUE, mode: QueueMode.RELIABLE });
    // The instance's own connections, before any stream exists.
    const fixed = await switchyardConnections();
    expect(fixed.filter((c) => c.cmd === "blmove")).toHaveLength(0);

    for (let i = 0; i < STREAMS; i++) sessions.push(clients[i % CLIENTS].lease(QUEUE, 1));
    await Promise.all(sessions.map((s) => s.opened));
    expect((await sy.client.getQueueStats(QUEUE)).leaseStreams).toBe(STREAMS);

    // Wait until the queue's pump is parked on its blocking reader (the queue is empty).
    const connections = await eventually("the blocking reader", switchyardConnections, (cs) => cs.some((c) => c.cmd === "blmove"));
    const blocking = connections.filter((c) => c.cmd === "blmove");
    const subscribers = connections.filter((c) => c.sub > 0);
    const commands = connections.filter((c) => c.cmd !== "blmove" && c.sub === 0);
    const detail = JSON.stringify(connections);
    // 1,000 streams add exactly one connection to the instance's fixed set: the queue's blocking
    // reader. (On a cluster, also the command connection to the queue's master if it had none yet.)
    const masters = onCluster ? 3 : 1;
    expect(connections.length - fixed.length, detail).toBeGreaterThanOrEqual(1);
    expect(connections.length - fixed.length, detail).toBeLessThanOrEqual(onCluster ? 2 : 1);
    // The bound, whatever the number of streams: 3 connections per instance (5 on a 3-master cluster).
    //   1 shared command connection (every LPUSH, lease.lua and settle.lua call is pipelined on it;
    //     a cluster client has one per master it has talked to),
    //   1 blocking reader for this queue (BLMOVE {fan} {fan} RIGHT RIGHT, which only wakes the pump),
    //   1 pub/sub connection shared by the queue registry and the cron scheduler.
    expect(commands.length, detail).toBeGreaterThanOrEqual(1);
    expect(commands.length, detail).toBeLessThanOrEqual(masters);
    expect(blocking, detail).toHaveLength(1);
    expect(subscribers, detail).toHaveLength(1);
    expect(connections.length, detail).toBeLessThanOrEqual(masters + 2);

    // 10 more items than there is credit: they must stay in the queue.
    const EXTRA = 10;
    const payloads = Array.from({ length: STREAMS }, (_, i) => `item-${i}`);
    const ids = await sy.client.enqueue(QUEUE, [...payloads, ...Array.from({ length: EXTRA }, (_, i) => `extra-${i}`)]);
    expect(new Set(ids).size).toBe(STREAMS + EXTRA);

    // Every stream gets one item, and a stream holding its credit of 1 gets nothing more:
    // exactly 1,000 items were moved to processing, each of the 1,000 streams holds a
    // different one, and the 10 extra items are still in the queue (items are pushed at
    // the left and taken from the right, so the first 1,000 enqueued are the ones leased).
    const delivered: Delivery[] = await Promise.all(sessions.map(async (s) => (await s.take(1))[0]));
    expect(new Set(delivered.map((d) => Buffer.from(d.payload).toString()))).toEqual(new Set(payloads));
    expect(new Set(delivered.map((d) => d.id))).toEqual(new Set(ids.slice(0, STREAMS)));
    expect(new Set(delivered.map((d) => d.leaseToken)).size).toBe(STREAMS);
    expect(new Set(delivered.map((d) => d.fence)).size).toBe(STREAMS);
    expect(delivered.every((d) => d.deliveryCount === 1 && d.queue === QUEUE)).toBe(true);
    expect(await redis.plain.llen(QUEUE)).toBe(EXTRA);
    expect(await redis.plain.llen(`${QUEUE}.processing`)).toBe(STREAMS);
    const stats = await sy.client.getQueueStats(QUEUE);
    expect(stats.ready).toBe(BigInt(EXTRA));
    expect(stats.processing).toBe(BigInt(STREAMS));

    // Still the same connections after the burst.
    const after = await switchyardConnections();
    expect(after.length, JSON.stringify(after)).toBe(connections.length);

    // Ack everything on the streams: the freed credit takes the 10 extra items.
    sessions.forEach((s, i) => s.ack(delivered[i].leaseToken));
    const state = async () => [await redis.plain.llen(QUEUE), await redis.plain.llen(`${QUEUE}.processing`)];
    await eventually("the acks and the extra items' leases", state, ([ready, processing]) => ready === 0 && processing === EXTRA);
    expect(await liveDeliveries(redis.plain, `${QUEUE}.leases`)).toBe(EXTRA);

    // Closing the streams returns the 10 unsettled items to the queue at once (Q10).
    await Promise.all(sessions.map((s) => s.close()));
    await eventually("every stream to close", async () => (await sy.client.getQueueStats(QUEUE)).leaseStreams, (n) => n === 0);
    await eventually("the unsettled items' return", state, ([ready, processing]) => ready === EXTRA && processing === 0);
    expect(await liveDeliveries(redis.plain, `${QUEUE}.leases`)).toBe(0);
    const left = (await redis.plain.lrangeBuffer(QUEUE, 0, -1)).map((v) => v.toString("latin1"));
    expect(left.filter((v) => v.includes("extra-"))).toHaveLength(EXTRA);
    expect((await switchyardConnections()).length).toBeLessThanOrEqual(connections.length);
  });
});
