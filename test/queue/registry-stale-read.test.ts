/**
 * A read of the declarations whose answer reaches an instance after a change
 * event that is newer than the read (src/queue/registry.ts). The read goes out
 * on the command connection, the event comes on the pub/sub one, and Redis
 * does not order the two: an instance whose subscriber just reconnected reads
 * every declaration afresh, a pause made meanwhile comes as an event, and the
 * read's older answer must not undo the pause (a paused queue's deliveries on
 * that instance, found by the model tests, seed 25 at 50 × 150 steps). The
 * same holds for the read of one declaration not cached yet. A link holds
 * instance a's command connection from the read on: the read runs before the
 * pause, and its answer is let through once a has applied the pause's event.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { systemKeys } from "../../src/redis/keys.js";
import { QueueRegistry } from "../../src/queue/registry.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

const log = createLogger("error");
const keys = systemKeys("switchyard");
let redis: StandaloneRedis;
let link: Link;
let connections: RedisConnection[] = [];
let registries: QueueRegistry[] = [];

async function registry(via: "link" | "direct"): Promise<{ registry: QueueRegistry; connection: RedisConnection }> {
  const url = via === "link" ? `redis://${link.address}` : undefined;
  const connection = await connectRedis(url ? { kind: "standalone", url } : { kind: "socket", path: redis.socketPath }, log);
  connections.push(connection);
  const r = new QueueRegistry(connection, keys, new ManualClock(), log);
  await r.start();
  registries.push(r);
  return { registry: r, connection };
}

/** Until every answer that reached `connection` so far has been acted on: its replies come in order, and a turn of the event loop runs what they resolved. */
async function drained(connection: RedisConnection): Promise<void> {
  await connection.client.ping();
  await new Promise((ok) => setImmediate(ok));
}

beforeAll(async () => {
  redis = await startStandaloneRedis();
  link = await startLink(redis.socketPath);
});
afterEach(async () => {
  for (const r of registries) await r.stop();
  for (const c of connections) await c.close();
  [registries, connections] = [[], []];
  await redis.flushAll();
});
afterAll(async () => {
  await link?.close();
  await redis?.stop();
});

/** The read of every declaration: read-declaration.lua as EVALSHA with its two keys and no name (five words). */
const fullRead = (chunk: Buffer) => /^\*5\r\n\$7\r\nevalsha\r\n/i.test(chunk.toString("latin1"));

const pause = (r: QueueRegistry, name: string) => r.update(name, (c) => ({ ...c, paused: true }));

describe("a declaration read answered after a newer change event", () => {
  it("keeps the pause an event brought while the read after a reconnect was out", async () => {
    const name = "{resync}";
    const a = await registry("link");
    const b = await registry("direct");
    await b.registry.create({ name, mode: "reliable" });
    await expect.poll(() => a.registry.cached(name)?.name).toBe(name);

    const holding = link.hold(fullRead);
    // Every subscriber connection dropped: a's reconnects (through the link), subscribes again and reads every declaration.
    await redis.plain.client("KILL", "TYPE", "pubsub");
    const held = await holding;
    held.forward(); // the read runs now, before the pause
    await expect.poll(() => held.replies.includes(`"name":"${name}"`)).toBe(true);
    expect(held.replies).toContain(`"paused":false`);
    await pause(b.registry, name);
    await expect.poll(() => a.registry.cached(name)?.paused).toBe(true); // the event, on a's new subscriber

    held.release();
    await drained(a.connection);
    expect(a.registry.cached(name)?.paused).toBe(true);
    expect(a.registry.known().map((c) => [c.name, c.paused])).toEqual([[name, true]]);
  });

  it("keeps a queue deleted by an event while the read was out, and takes a later read's changes", async () => {
    const [gone, kept] = ["{gone}", "{kept}"];
    const a = await registry("link");
    const b = await registry("direct");
    await b.registry.create({ name: gone, mode: "reliable" });
    await b.registry.create({ name: kept, mode: "reliable" });
    await expect.poll(() => a.registry.known().length).toBe(2);

    const holding = link.hold(fullRead);
    await redis.plain.client("KILL", "TYPE", "pubsub");
    const held = await holding;
    held.forward();
    await expect.poll(() => held.replies.includes(`"name":"${gone}"`)).toBe(true);
    await b.registry.delete(gone, false);
    await expect.poll(() => a.registry.cached(gone)).toBeUndefined();
    held.release();
    await drained(a.connection);
    expect(a.registry.known().map((c) => c.name)).toEqual([kept]);

    // A change written behind a's back (no event) shows at a's next full read.
    const stored = JSON.parse((await redis.plain.hget(keys.queues, kept))!) as Record<string, unknown>;
    await redis.plain.hset(keys.queues, kept, JSON.stringify({ ...stored, paused: true }));
    await redis.plain.client("KILL", "TYPE", "pubsub");
    await expect.poll(() => a.registry.cached(kept)?.paused).toBe(true);
  });

  it("believes a Redis that lost its declarations and counts changes from the start again", async () => {
    const name = "{again}";
    const a = await registry("link");
    const b = await registry("direct");
    await b.registry.create({ name, mode: "reliable" });
    await pause(b.registry, name);
    await expect.poll(() => a.registry.cached(name)?.paused).toBe(true);

    await redis.flushAll(); // as a Redis restarted with no data: the version counter starts again
    await redis.plain.client("KILL", "TYPE", "pubsub");
    await expect.poll(() => a.registry.cached(name)).toBeUndefined();
    // Declared again, its change has version 1 again: a takes it from the event alone.
    await b.registry.create({ name, mode: "reliable" });
    await expect.poll(() => a.registry.cached(name)?.paused).toBe(false);
  });

  it("takes the changes made after Redis lost its declarations with no connection lost (FLUSHALL), its own too", async () => {
    const b = await registry("direct");
    for (let i = 0; i < 5; i++) await b.registry.create({ name: `{before${i}}`, mode: "reliable" });
    const a = await registry("direct"); // its first read finds the counter at 5
    await redis.plain.flushall();
    // Declared again from 1: a cannot take the event for news by its number alone, and reads again.
    await b.registry.create({ name: "{work}", mode: "reliable" });
    await expect.poll(() => a.registry.known().map((c) => c.name)).toEqual(["{work}"]);
    await pause(a.registry, "{work}");
    await expect.poll(() => a.registry.cached("{work}")?.paused).toBe(true);
    await expect.poll(() => b.registry.cached("{work}")?.paused).toBe(true);
    // From here on its changes are news again.
    await b.registry.update("{work}", (c) => ({ ...c, paused: false }));
    await expect.poll(() => a.registry.cached("{work}")?.paused).toBe(false);
  });

  it("keeps the pause an event brought while the first read of an uncached declaration was out", async () => {
    const name = "{late}";
    const a = await registry("link");
    const b = await registry("direct");
    // Declared behind a's back (as in registry-order.test.ts): no event, so a's cache lacks it.
    const elsewhere = new QueueRegistry(b.connection, systemKeys("elsewhere"), new ManualClock(), log);
    const config = await elsewhere.create({ name, mode: "reliable" });
    await redis.plain.hset(keys.queues, name, JSON.stringify(config));
    expect(a.registry.cached(name)).toBeUndefined();

    // The read of the name: read-declaration.lua, known to Redis by then (a read of an undeclared
    // name loaded it), so it goes as one EVALSHA.
    await expect(a.registry.get("{undeclared}")).rejects.toThrow(/not declared/);
    const holding = link.hold((chunk) => /\r\nevalsha\r\n/i.test(chunk.toString("latin1")) && chunk.toString("latin1").includes(name));
    const first = a.registry.get(name);
    const held = await holding;
    held.forward();
    await expect.poll(() => held.replies.includes(`"name":"${name}"`)).toBe(true);
    await pause(b.registry, name);
    await expect.poll(() => a.registry.cached(name)?.paused).toBe(true);
    held.release();
    expect((await first).paused).toBe(true);
    expect(a.registry.cached(name)?.paused).toBe(true);
  });
});
