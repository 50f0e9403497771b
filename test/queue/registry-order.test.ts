/**
 * The queue registry answers get() calls for one name in call order
 * (src/queue/registry.ts): a call made while a read of an uncached
 * declaration is out waits for that read, even when a change event fills the
 * cache first. Otherwise the second of two EnqueueStream requests to a queue
 * just declared elsewhere could reach its push before the first.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { systemKeys } from "../../src/redis/keys.js";
import { QueueRegistry } from "../../src/queue/registry.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";

const log = createLogger("error");
let redis: TestRedis;
const connections: RedisConnection[] = [];

async function registry(namespace: string): Promise<QueueRegistry> {
  const connection = await connectRedis(redis.target, log);
  connections.push(connection);
  const r = new QueueRegistry(connection, systemKeys(namespace), new ManualClock(), log);
  await r.start();
  return r;
}

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  for (const c of connections) await c.close();
  await redis?.stop();
});

describe("QueueRegistry.get", () => {
  it("answers calls for one name in call order, though a change event fills the cache while the first read is out", async () => {
    const name = "{late}";
    // The declaration is written behind this instance's back (as another instance's would be,
    // before its change event arrives): a is not told, and its cache does not hold it.
    const config = await (await registry("elsewhere")).create({ name, mode: "reliable" });
    const a = await registry("here");
    await redis.nodeFor(systemKeys("here").queues).hset(systemKeys("here").queues, name, JSON.stringify(config));

    const order: string[] = [];
    const first = a.get(name).then((c) => order.push(`first ${c.name}`));
    // The change event arrives now, while the first call's HGET is out (delivered as the
    // subscription would deliver it).
    (a as unknown as { onEvent(message: string): void }).onEvent(JSON.stringify({ op: "put", name, config }));
    const second = a.get(name).then((c) => order.push(`second ${c.name}`));
    // Nor does a caller that would go on at once (ready(), Queues.prepare's way): the cache holds the
    // name, but a read of it is out, so it is told to wait with the others.
    expect(a.cached(name)?.name).toBe(name);
    expect(a.ready(name)).toBeUndefined();
    await Promise.all([first, second]);
    expect(order).toEqual([`first ${name}`, `second ${name}`]);
    // The read is forgotten before its callers went on: a call now goes on at once.
    expect(a.ready(name)?.name).toBe(name);

    // Once the read is back, calls are answered from the cache: no more HGETs.
    const hgets = async () => Number(/cmdstat_hget:calls=(\d+)/.exec((await redis.nodeFor(systemKeys("here").queues).info("commandstats")) as string)?.[1] ?? 0);
    const before = await hgets();
    await Promise.all([a.get(name), a.get(name)]);
    expect(await hgets()).toBe(before);
  });

  it("shares one read among the calls that arrive while it is out, and fails them all alike for an undeclared name", async () => {
    const a = await registry("shared");
    const hgets = async () => Number(/cmdstat_hget:calls=(\d+)/.exec((await redis.nodeFor(systemKeys("shared").queues).info("commandstats")) as string)?.[1] ?? 0);
    const before = await hgets();
    const outcomes = await Promise.allSettled([a.get("{nowhere}"), a.get("{nowhere}"), a.get("{nowhere}")]);
    expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected", "rejected"]);
    expect(String((outcomes[0] as PromiseRejectedResult).reason)).toContain('queue "{nowhere}" is not declared');
    // One read: one HGET of the declaration (in read-declaration.lua).
    expect((await hgets()) - before).toBe(1);
    // A name that failed is read again next time (it may have been declared since).
    await expect(a.get("{nowhere}")).rejects.toThrow("not declared");
    expect((await hgets()) - before).toBe(2);
  });
});
