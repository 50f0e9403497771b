/**
 * A queue declared again — from a config file, after DeleteQueue, in another
 * mode — never strands items or lets an old token touch a new delivery
 * (issue 12 defect 11 and the suspected items of its list).
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode, type SettleResult } from "../../src/gen/switchyard/v1/queue_pb.js";
import { systemKeys } from "../../src/redis/keys.js";
import { leaseRecords, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;
const dir = mkdtempSync(join(tmpdir(), "sy-redeclare-"));

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

/** A config file declaring `queues` (protobuf JSON). */
function configFile(name: string, queues: unknown[]): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify({ queues }));
  return path;
}

const code = (p: Promise<unknown>) => p.then(() => grpc.status.OK, (e: grpc.ServiceError) => e.code);

describe("a config file that declares a served queue again", () => {
  it("cannot rename its processing list while items sit in it: the instance refuses to start, and the items can still be acked", async () => {
    const q = "{cfg}";
    const first = await startSwitchyard(redis, { env: { SWITCHYARD_CONFIG_FILE: configFile("a.json", [{ name: q, mode: "QUEUE_MODE_RELIABLE" }]) } });
    try {
      await first.client.enqueue(q, ["in flight"]);
      const lease = first.client.lease(q, 1);
      const [d] = await lease.take(1);
      const renamed = configFile("b.json", [{ name: q, mode: "QUEUE_MODE_RELIABLE", processingList: `${q}.inflight` }]);
      await expect(startSwitchyard(redis, { env: { SWITCHYARD_CONFIG_FILE: renamed } })).rejects.toThrow(/cannot change its mode or key names/);
      expect((await first.client.getQueue(q)).processingList).toBe(`${q}.processing`);
      await first.client.ack(d.leaseToken);
      expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
      expect(await redis.plain.exists(`${q}.inflight`)).toBe(0);
      await lease.close();
    } finally {
      await first.stop();
    }
  });

  it("changes settings on every running instance: a lowered max_deliveries applies to the next retry", async () => {
    const q = "{cfg-max}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 5 });
    const other = await startSwitchyard(redis, {
      env: { SWITCHYARD_CONFIG_FILE: configFile("c.json", [{ name: q, mode: "QUEUE_MODE_RELIABLE", maxDeliveries: 1 }]) },
    });
    try {
      await expect.poll(async () => (await sy.client.getQueue(q)).maxDeliveries).toBe(1);
      await sy.client.enqueue(q, ["once"]);
      const lease = sy.client.lease(q, 1);
      const [d] = await lease.take(1);
      expect((await sy.client.retry(d.leaseToken)).deadLettered).toBe(true);
      await lease.close();
    } finally {
      await other.stop();
    }
  });

  it("takes an explicit \"jitter\": 0 as waits without jitter (proto3 reads 0 as unset, the default 0.2)", async () => {
    const steady = "{cfg-steady}";
    const jittery = "{cfg-jittery}";
    const other = await startSwitchyard(redis, {
      env: {
        SWITCHYARD_CONFIG_FILE: configFile("d.json", [
          { name: steady, mode: "QUEUE_MODE_RELIABLE", retryPolicy: { initialBackoff: "1s", jitter: 0 } },
          { name: jittery, mode: "QUEUE_MODE_RELIABLE", retry_policy: { initial_backoff: "1s" } },
        ]),
      },
    });
    try {
      expect((await sy.client.getQueue(steady)).retryPolicy?.jitter).toBe(0);
      expect((await sy.client.getQueue(jittery)).retryPolicy?.jitter).toBe(0.2);
    } finally {
      await other.stop();
    }
  });
});

describe("a queue deleted and declared again", () => {
  it("keeps its fence counter, so a token from before never acks a delivery of after, equal values included", async () => {
    const q = "{again}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await redis.plain.lpush(q, "same");
    const before = sy.client.lease(q, 1);
    const [old] = await before.take(1);
    await before.cancel();
    await sy.client.deleteQueue(q, { purge: true });
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await redis.plain.lpush(q, "same");
    const after = sy.client.lease(q, 1);
    const [fresh] = await after.take(1);
    expect(fresh.fence).toBeGreaterThan(old.fence);
    expect(await code(sy.client.ack(old.leaseToken))).not.toBe(grpc.status.OK);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(1); // the new delivery is untouched
    await sy.client.ack(fresh.leaseToken);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    await after.close();
  });

  it("refuses a simple queue's token on a queue that is now reliable, changing nothing", async () => {
    const q = "{mode-change}";
    await sy.client.createQueue({ name: q, mode: QueueMode.SIMPLE });
    await sy.client.enqueue(q, ["popped"]);
    const simple = sy.client.lease(q, 1);
    const [d] = await simple.take(1);
    expect(d.leaseToken).toMatch(/^s\./);
    await simple.close();
    await sy.client.deleteQueue(q, { purge: true });
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(q, ["held"]);
    const reliable = sy.client.lease(q, 1);
    const [held] = await reliable.take(1);
    for (const settle of [() => sy.client.ack(d.leaseToken), () => sy.client.retry(d.leaseToken), () => sy.client.drop(d.leaseToken)]) {
      const err = await settle().then(() => undefined, (e: grpc.ServiceError) => e);
      expect([err?.code, err?.details]).toEqual([grpc.status.FAILED_PRECONDITION, expect.stringContaining("SIMPLE")]);
    }
    expect(await redis.plain.llen(`${q}.processing`)).toBe(1);
    await sy.client.ack(held.leaseToken);
    await reliable.close();
  });
});

describe("a delete event that arrives after the queue was declared again", () => {
  // Events come on the subscriber connection, answers on the command connection: an instance that
  // deletes and declares a queue again may hear of the delete after its own new declaration.
  // Found by the queue model test: the stale event failed the new declaration's streams.
  it("changes nothing: the new declaration and its streams stay", async () => {
    const q = "{late-delete}";
    const channel = systemKeys("switchyard").events;
    const listener = redis.plain.duplicate();
    const events: string[] = [];
    listener.on("message", (_: string, m: string) => events.push(m));
    await listener.subscribe(channel);
    try {
      await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
      await sy.client.deleteQueue(q, { purge: true });
      await expect.poll(() => events.filter((e) => e.includes('"delete"'))).toHaveLength(1);
      const deleted = events.find((e) => e.includes('"delete"'))!;
      await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
      const lease = sy.client.lease(q, 1);
      await sy.client.enqueue(q, ["kept"]);
      const [d] = await lease.take(1);
      // The delete event again, as a late delivery would bring it; then a declaration through
      // another instance, whose event shows this one has read past it.
      await redis.plain.publish(channel, deleted);
      const other = await startSwitchyard(redis);
      await other.client.createQueue({ name: "{late-marker}", mode: QueueMode.SIMPLE });
      await other.stop();
      await expect.poll(() => sy.app.queues.registry.cached("{late-marker}")).toBeDefined();
      expect(sy.app.queues.registry.cached(q)).toBeDefined();
      const results: SettleResult[] = [];
      lease.onSettleResult((r) => results.push(r));
      lease.ack(d.leaseToken);
      await expect.poll(() => redis.plain.llen(`${q}.processing`)).toBe(0);
      expect(results).toEqual([]);
      expect(await lease.close()).toBeUndefined();
    } finally {
      listener.disconnect();
    }
  });
});

describe("an ack batch that names one token twice", () => {
  it("acks it once and reports no failure", async () => {
    const q = "{twice}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(q, ["a", "b"]);
    const lease = sy.client.lease(q, 2);
    const [a, b] = await lease.take(2);
    const results: SettleResult[] = [];
    lease.onSettleResult((r) => results.push(r));
    // Made in one turn, these go out as one ack_batch.
    for (const token of [a.leaseToken, a.leaseToken, b.leaseToken]) lease.ack(token);
    await expect.poll(() => redis.plain.llen(`${q}.processing`)).toBe(0);
    await lease.close();
    expect(results).toEqual([]);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
  });
});
