/**
 * SPEC Q8: Ack, Retry and Drop work from any instance, given the lease token.
 * A delivery settled through another instance than the one whose stream holds
 * it must free that stream's credit, or the stream takes nothing more once its
 * credit is used up this way: on a reliable queue by the holder's heartbeat
 * check (it reads the delivery's record), on a simple queue, which has no
 * record, by the settling instance's announcement. Found by reading, while
 * writing the queue model test; the simple case failed before. An announcement
 * made while the holder's pub/sub connection was being made again reaches it
 * once it listens again (the model tests at 50 × 150 steps, seed 141: the
 * stream's credit stayed taken for good). An announcement the settling
 * instance lost with its connection is made again once it is back, and one
 * that never came (that instance died after its record) is found by the
 * holder's heartbeat check (the trickle model history of seed 8321 at 200
 * steps: an outage of the settling instance, and the credit stayed taken).
 * A break review found the rest: a record older than the delivery's pop (an
 * ack of a token not yet issued) must free nothing, or the stream holds more
 * than its credit; a record Redis refuses with the connection up (out of
 * memory, a cluster failover) is tried again on a timer, not only on "ready".
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../src/client/client.js";
import { ManualClock, SkewedClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { systemKeys } from "../../src/redis/keys.js";
import { keysOf } from "../../src/queue/declaration.js";
import { SETTLE_CLOCK_SLACK_MS } from "../../src/queue/queues.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import { tokenFormatter } from "../../src/queue/token.js";
import { startLink, type Link } from "../helpers/link.js";
import { startRedis, startStandaloneRedis, type StandaloneRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const HEARTBEAT_MS = 15_000;
let redis: TestRedis;
let holder: TestSwitchyard;
let other: TestSwitchyard;
const clock = new ManualClock();

beforeAll(async () => {
  redis = await startRedis();
  holder = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
  other = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
});
afterAll(async () => {
  await other?.stop();
  await holder?.stop();
  await redis?.stop();
});

describe("a delivery settled through another instance", () => {
  for (const [mode, name] of [[QueueMode.RELIABLE, "{elsewhere-reliable}"], [QueueMode.SIMPLE, "{elsewhere-simple}"]] as const) {
    // Reliable: by the holder's heartbeat check of the delivery's record; simple: at once, by the settling instance's announcement.
    it(`frees its stream's credit ${mode === QueueMode.RELIABLE ? "by the next heartbeat" : "without waiting for a heartbeat"} (${name})`, async () => {
      await holder.client.createQueue({ name, mode });
      await holder.client.enqueue(name, ["first", "second"]);
      const session = holder.client.lease(name, 1);
      const [first] = await session.take(1);
      await other.client.ack(first.leaseToken);
      if (mode === QueueMode.RELIABLE) await clock.advance(HEARTBEAT_MS);
      const [second] = await session.take(1);
      expect(Buffer.from(second.payload).toString()).toBe("second");
      await session.close();
    });
  }

  it("frees it when the settling instance's clock reads behind the holder's, by up to the slack", async () => {
    const name = "{elsewhere-behind}";
    const behind = await startSwitchyard(redis, { clock: new SkewedClock(clock, -SETTLE_CLOCK_SLACK_MS), config: { heartbeatIntervalMs: HEARTBEAT_MS } });
    try {
      await holder.client.createQueue({ name, mode: QueueMode.SIMPLE });
      await holder.client.enqueue(name, ["first", "second", "third"]);
      const session = holder.client.lease(name, 1);
      const [first] = await session.take(1);
      await behind.client.ack(first.leaseToken); // settled, by its clock, 1 s before the pop
      const [second] = await session.take(1);
      expect(Buffer.from(second.payload).toString()).toBe("second");
      // A drop too (the record the heartbeat check reads is held to the same slack).
      await behind.client.drop(second.leaseToken);
      const [third] = await session.take(1);
      expect(Buffer.from(third.payload).toString()).toBe("third");
      await session.close();
    } finally {
      await behind.stop();
    }
  });

  it("frees no reliable delivery for a message on the released channel, which names simple ones only", async () => {
    const [name, marker] = ["{elsewhere-forged}", "{elsewhere-forged-marker}"];
    await holder.client.createQueue({ name, mode: QueueMode.RELIABLE });
    await holder.client.createQueue({ name: marker, mode: QueueMode.SIMPLE });
    await holder.client.enqueue(name, ["first", "second"]);
    await holder.client.enqueue(marker, ["first", "second"]);
    const session = holder.client.lease(name, 1);
    const [first] = await session.take(1);
    const { released, recentlyReleased } = systemKeys("switchyard");
    // Published on the node where instances announce (with their record), so the holder hears them in this order.
    const node = redis.nodeFor(recentlyReleased);
    for (const message of [first.leaseToken, `${first.leaseToken} ${clock.now()}`, `${first.leaseToken} `]) await node.publish(released, message);
    // Announced after those: once the marker's credit is freed, the holder has heard them.
    const markerSession = holder.client.lease(marker, 1);
    const [m] = await markerSession.take(1);
    await other.client.ack(m.leaseToken);
    expect(Buffer.from((await markerSession.take(1))[0].payload).toString()).toBe("second");
    const stream = [...(holder.app.queues as unknown as { streams: Set<LeaseStream> }).streams].find((s) => s.queue === name)!;
    expect([...stream.held.keys()]).toEqual([first.leaseToken]);
    await Promise.all([session.close(), markerSession.close()]);
  });

  it("frees nothing for a record made before the delivery was popped (an ack of a token not yet issued)", async () => {
    const name = "{elsewhere-early}";
    await holder.client.createQueue({ name, mode: QueueMode.SIMPLE });
    await holder.client.enqueue(name, ["first", "second"]);
    // A simple queue's tokens are numbered by its fence counter (SPEC Q11): the next one can be named.
    const next = tokenFormatter(name)(Number((await redis.plain.get(keysOf(await holder.app.queues.registry.get(name)).fence)) ?? 0) + 1, "");
    await other.client.ack(next); // accepted (SPEC Q3), and recorded among the recent releases
    await clock.advance(SETTLE_CLOCK_SLACK_MS + 1); // further than two instances' clocks may disagree
    const session = holder.client.lease(name, 1);
    const [first] = await session.take(1);
    expect(first.leaseToken).toBe(next);
    // The heartbeat check, as its timer runs it: the record is older than the pop.
    const stream = [...(holder.app.queues as unknown as { streams: Set<LeaseStream> }).streams].find((s) => s.queue === name)!;
    await (holder.app.queues as unknown as { forgetReleasedSimple(s: LeaseStream): Promise<void> }).forgetReleasedSimple(stream);
    expect([...stream.held.keys()]).toEqual([next]);
    await other.client.ack(first.leaseToken); // settled now: freed, and the second comes
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    await session.close();
  });

  it("frees nothing for an announcement that comes after the pop, of a settle made before it", async () => {
    const recent = systemKeys("switchyard").recentlyReleased;
    const [name, marker] = ["{elsewhere-late}", "{elsewhere-late-marker}"];
    for (const q of [name, marker]) {
      await holder.client.createQueue({ name: q, mode: QueueMode.SIMPLE });
      await holder.client.enqueue(q, ["first", "second"]);
    }
    const next = tokenFormatter(name)(Number((await redis.plain.get(keysOf(await holder.app.queues.registry.get(name)).fence)) ?? 0) + 1, "");
    const unannounced = (other.app.queues as unknown as { unannounced: Map<string, number> }).unannounced;
    try {
      // The record fails (its key of another type): the settle is announced alone, and again with its record once the key is fit.
      await redis.plain.set(recent, "not a sorted set");
      await other.client.ack(next);
      await expect.poll(() => unannounced.has(next)).toBe(true);
      await clock.advance(SETTLE_CLOCK_SLACK_MS + 1);
      const session = holder.client.lease(name, 1);
      const [first] = await session.take(1);
      expect(first.leaseToken).toBe(next);
      await redis.plain.del(recent);
      await clock.advance(1000); // recorded and announced again (every second), after the pop
      await expect.poll(() => redis.plain.zrange(recent, 0, -1)).toEqual([next]);
      // The holder hears announcements in the order they were made: once a later one has freed the marker's credit, it has heard that one.
      const markerSession = holder.client.lease(marker, 1);
      const [m] = await markerSession.take(1);
      await other.client.ack(m.leaseToken);
      expect(Buffer.from((await markerSession.take(1))[0].payload).toString()).toBe("second");
      const stream = [...(holder.app.queues as unknown as { streams: Set<LeaseStream> }).streams].find((s) => s.queue === name)!;
      expect([...stream.held.keys()]).toEqual([next]);
      session.ack(first.leaseToken); // settled now, by its holder: freed, and the second comes
      expect(Buffer.from((await session.take(1))[0].payload).toString()).toBe("second");
      await Promise.all([session.close(), markerSession.close()]);
    } finally {
      await redis.plain.del(recent);
    }
  });
});

describe("a simple delivery settled through another instance while the holder does not listen", () => {
  let own: StandaloneRedis;
  let link: Link;
  let cut: TestSwitchyard;
  let elsewhere: TestSwitchyard;
  /** What this test started, stopped last first (all of it, whatever fails). */
  let started: (() => Promise<unknown>)[] = [];
  beforeEach(async () => {
    own = await startStandaloneRedis();
    started.push(() => own.stop());
    link = await startLink(own.socketPath);
    started.push(() => link.close());
    cut = await startSwitchyard({ target: { kind: "standalone", url: `redis://${link.address}` } }, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
    started.push(() => cut.stop());
    elsewhere = await startSwitchyard(own, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
    started.push(() => elsewhere.stop());
  });
  afterEach(async () => {
    for (const stop of started.reverse()) await stop().catch(() => undefined);
    started = [];
  });

  /** A SIMPLE queue with two items, and a stream on the holder (`cut` unless said) at credit 1 holding the first. */
  async function holding(name: string, holder = cut): Promise<{ session: LeaseSession; first: Delivery }> {
    await elsewhere.client.createQueue({ name, mode: QueueMode.SIMPLE });
    await elsewhere.client.enqueue(name, ["first", "second"]);
    const session = holder.client.lease(name, 1);
    const [first] = await session.take(1);
    return { session, first };
  }

  it("frees its stream's credit once the holder's connections are back", { timeout: 15_000 }, async () => {
    const { session, first } = await holding("{elsewhere-missed}");
    link.down(); // every connection of the holder, its pub/sub one too, is lost and cannot be made again
    await elsewhere.client.ack(first.leaseToken); // announced while nobody on the holder listens
    const reconnected = new Promise((ok) => cut.app.redis.client.once("ready", ok));
    link.up();
    await reconnected;
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    expect(await own.plain.zrange(systemKeys("switchyard").recentlyReleased, 0, -1)).toEqual([first.leaseToken]);
    await session.close();
  });

  it("frees it when the holder listens again before its command connection is back", { timeout: 15_000 }, async () => {
    const { session, first } = await holding("{elsewhere-order}");
    // The holder's pub/sub connection is lost, and its SUBSCRIBE held: it does not listen while the ack is announced.
    const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
    await own.plain.client("KILL", "TYPE", "pubsub");
    const held = await subscribing;
    // Heard here, the announcement ran in Redis: the holder's SUBSCRIBE, forwarded after it, misses it.
    // (Forwarded before it ran, the holder would hear it and pop the second item, a pop the drop
    // below can cut, losing that item of a simple queue for good: this test's flake.)
    const listener = own.plain.duplicate();
    started.push(() => listener.quit());
    const announced = new Promise<void>((ok) => listener.on("message", (_channel: string, message: string) => message.startsWith(`${first.leaseToken} `) && ok()));
    await listener.subscribe(systemKeys("switchyard").released);
    await elsewhere.client.ack(first.leaseToken);
    await announced;
    expect(await own.plain.zrange(systemKeys("switchyard").recentlyReleased, 0, -1)).toEqual([first.leaseToken]);
    // Once it listens, its read of the recent releases is lost with its command connection, which is made again.
    let lost = false;
    link.drop = (chunk) => !lost && (lost = chunk.toString("latin1").includes(systemKeys("switchyard").recentlyReleased));
    const reconnected = new Promise((ok) => cut.app.redis.client.once("ready", ok));
    held.forward();
    held.release();
    await reconnected;
    expect(lost).toBe(true);
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    await session.close();
  });
  it("frees it when the settling instance cannot reach Redis as it settles: announced once it is back", { timeout: 15_000 }, async () => {
    const name = "{elsewhere-unannounced}";
    const { session, first } = await holding(name, elsewhere);
    const recent = systemKeys("switchyard").recentlyReleased;
    await cut.app.queues.registry.get(name); // the settling instance knows the queue: its ack needs no Redis read
    const reconnected = new Promise((ok) => cut.app.redis.client.once("ready", ok));
    link.down();
    await cut.client.ack(first.leaseToken); // accepted all the same (SPEC Q3)
    expect(await own.plain.zrange(recent, 0, -1)).toEqual([]);
    link.up();
    await reconnected;
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    expect(await own.plain.zrange(recent, 0, -1)).toEqual([first.leaseToken]);
    await session.close();
  });

  it("frees it by the holder's next heartbeat when the settle was recorded and never announced", { timeout: 15_000 }, async () => {
    const { session, first } = await holding("{elsewhere-unheard}", elsewhere);
    // What an instance leaves that dies between its record of an ack and the announcement.
    await own.plain.zadd(systemKeys("switchyard").recentlyReleased, clock.now(), first.leaseToken);
    await clock.advance(HEARTBEAT_MS);
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    await session.close();
  });
  it("records a release Redis refused (out of memory) once it takes writes again, with no reconnect to wait for", { timeout: 15_000 }, async () => {
    const { session, first } = await holding("{elsewhere-oom}", elsewhere);
    const recent = systemKeys("switchyard").recentlyReleased;
    await own.plain.config("SET", "maxmemory-policy", "noeviction");
    await own.plain.config("SET", "maxmemory", "1");
    const unannounced = (cut.app.queues as unknown as { unannounced: Map<string, number> }).unannounced;
    try {
      await cut.client.ack(first.leaseToken); // accepted (SPEC Q3); the record is refused
      await expect.poll(() => [...unannounced.keys()]).toEqual([first.leaseToken]);
      expect(await own.plain.zrange(recent, 0, -1)).toEqual([]);
    } finally {
      await own.plain.config("SET", "maxmemory", "0");
    }
    // The announcement alone was served (Redis takes PUBLISH when out of memory): the holder's credit is free.
    const [second] = await session.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    // The record is tried again on a timer: the connection never dropped, so no "ready" comes.
    await clock.advance(1000);
    await expect.poll(() => own.plain.zrange(recent, 0, -1)).toEqual([first.leaseToken]);
    expect(unannounced.size).toBe(0);
    await session.close();
  });
});

describe("a recent-releases key another client overwrote", () => {
  // Each stream checks what it holds every heartbeat: a cause that fails them all alike (this key, a queue
  // key of another type, Redis down) used to log a warning per stream per heartbeat.
  describe("the heartbeat checks it fails", () => {
    const lines: string[] = [];
    let watcher: TestSwitchyard;
    const said = (level: string, msg: string) =>
      lines.map((l) => JSON.parse(l) as { level: string; msg: string }).filter((l) => l.level === level && l.msg.startsWith(msg)).length;
    const counts = () => ({ warn: said("warn", "lease check failed"), debug: said("debug", "lease check failed"), info: said("info", "lease checks go through again") });
    /** Advances `beats` heartbeats, each failing the checks of `holding` streams. */
    const failingBeats = async (beats: number, holding: number) => {
      const before = counts().warn + counts().debug;
      for (let beat = 1; beat <= beats; beat++) {
        await clock.advance(HEARTBEAT_MS);
        await expect.poll(() => counts().warn + counts().debug - before).toBe(holding * beat);
      }
    };
    beforeAll(async () => {
      watcher = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS }, log: createLogger("debug", (l) => void lines.push(l)) });
    });
    afterAll(() => watcher?.stop());

    it("warn once for the queue, not per heartbeat or stream, and say when they go through again (simple)", async () => {
      lines.length = 0;
      const recent = systemKeys("switchyard").recentlyReleased;
      const name = "{elsewhere-check-simple}";
      try {
        await watcher.client.createQueue({ name, mode: QueueMode.SIMPLE });
        await watcher.client.enqueue(name, ["first", "second"]);
        const sessions = [watcher.client.lease(name, 1), watcher.client.lease(name, 1)];
        for (const session of sessions) await session.take(1); // held: each heartbeat reads the recent releases for it
        // A third stream holds nothing, so its heartbeats check nothing and say nothing.
        sessions.push(watcher.client.lease(name, 1));
        await expect.poll(async () => (await watcher.client.getQueueStats(name)).leaseStreams).toBe(3);
        await redis.plain.set(recent, "not a sorted set");
        await failingBeats(3, 2);
        expect(counts()).toEqual({ warn: 1, debug: 5, info: 0 });
        expect(lines.find((l) => l.includes("lease check failed"))).toContain("WRONGTYPE");
        await redis.plain.del(recent);
        await clock.advance(HEARTBEAT_MS);
        await expect.poll(() => counts().info).toBe(1);
        expect(counts()).toEqual({ warn: 1, debug: 5, info: 1 });
        for (const session of sessions) await session.close();
      } finally {
        await redis.plain.del(recent);
      }
    });

    it("still free what was settled elsewhere once they go through, and warn afresh for a queue whose streams had all closed (reliable)", async () => {
      lines.length = 0;
      const name = "{elsewhere-check-reliable}";
      await watcher.client.createQueue({ name, mode: QueueMode.RELIABLE });
      const { leases } = keysOf(await watcher.app.queues.registry.get(name));
      const breakLeases = async () => {
        await redis.plain.rename(leases, `${leases}.kept`); // the same slot
        await redis.plain.set(leases, "not a hash");
      };
      const mendLeases = () => redis.plain.rename(`${leases}.kept`, leases);
      await watcher.client.enqueue(name, ["a", "b", "c"]);
      const [one, two] = [watcher.client.lease(name, 1), watcher.client.lease(name, 1)];
      const [a] = await one.take(1);
      await two.take(1);
      await breakLeases();
      await failingBeats(3, 2);
      expect(counts()).toEqual({ warn: 1, debug: 5, info: 0 });
      await mendLeases();
      await clock.advance(HEARTBEAT_MS);
      await expect.poll(() => counts().info).toBe(1);
      // The checks answered: nothing was let go meanwhile, and an ack through another instance frees its credit.
      await other.client.ack(a.leaseToken);
      await clock.advance(HEARTBEAT_MS);
      const [c] = await one.take(1);
      expect(Buffer.from(c.payload).toString()).toBe("c");
      // Failing again, then every stream gone before a check went through: the next failure is warned of.
      await breakLeases();
      await failingBeats(1, 2);
      expect(counts().warn).toBe(2);
      await mendLeases();
      await Promise.all([one.close(), two.close()]);
      await watcher.client.enqueue(name, ["d"]);
      const three = watcher.client.lease(name, 1);
      await three.take(1);
      await breakLeases();
      await failingBeats(2, 1);
      expect(counts()).toEqual({ warn: 3, debug: 7, info: 1 });
      await mendLeases();
      await three.close();
    });
  });

  it("warns once while the record fails, tries again each second, and records once the key is fit again", async () => {
    const lines: string[] = [];
    const settling = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS }, log: createLogger("info", (l) => void lines.push(l)) });
    const recent = systemKeys("switchyard").recentlyReleased;
    try {
      const name = "{elsewhere-wrongtype}";
      await holder.client.createQueue({ name, mode: QueueMode.SIMPLE });
      await holder.client.enqueue(name, ["first", "second"]);
      const session = holder.client.lease(name, 1);
      const [first] = await session.take(1);
      await redis.plain.set(recent, "not a sorted set");
      await settling.client.ack(first.leaseToken); // accepted (SPEC Q3)
      // The announcement goes alone when the record fails: the holder's credit is free all the same.
      const [second] = await session.take(1);
      expect(Buffer.from(second.payload).toString()).toBe("second");
      const queues = settling.app.queues as unknown as { unannounced: Map<string, number>; announceTimer?: unknown };
      const waitingAgain = () => queues.announceTimer !== undefined && queues.unannounced.has(first.leaseToken);
      await expect.poll(waitingAgain).toBe(true);
      for (let i = 0; i < 3; i++) {
        await clock.advance(1000);
        await expect.poll(waitingAgain).toBe(true);
      }
      const said = (msg: string) => lines.filter((l) => (JSON.parse(l) as { msg: string }).msg.startsWith(msg)).length;
      expect(said("could not record simple deliveries settled here")).toBe(1);
      await redis.plain.del(recent);
      await clock.advance(1000);
      await expect.poll(() => redis.plain.zrange(recent, 0, -1)).toEqual([first.leaseToken]);
      expect(queues.unannounced.size).toBe(0);
      expect(said("recorded the simple deliveries settled here")).toBe(1);
      await session.close();
    } finally {
      await redis.plain.del(recent);
      await settling.stop();
    }
  });
});
