/**
 * An instance that missed a queue's delete and its declaration again, made
 * through another instance while its pub/sub connection was being made again,
 * learns of them by reading the declarations afresh once it listens again. A
 * Lease stream it had open on the old declaration ends as the delete would have
 * ended it, and never goes on under the new one, even one asking for the same
 * (the new queue's items are not the old stream's business). The same when it
 * hears the new declaration's event but not the delete's, when what it hears
 * first is a later change of the new declaration (a pause), and when Redis is out
 * of memory as it reads again. Each declaration made anew carries an incarnation
 * id that its changes keep, which is how an instance tells them apart.
 *
 * And the other way round: a Lease stream opened after the delete and the new
 * declaration, whose events have not reached this instance yet, opens on the new
 * declaration, and the events, come late, do not end it (found by the model tests
 * at 50 × 150 steps, seed 346: the late delete ended the new stream).
 *
 * Instance `late` reaches Redis through a link. Its pub/sub connection is killed
 * (CLIENT KILL TYPE pubsub) and its next SUBSCRIBE held in the link, so it hears
 * nothing until the test lets the SUBSCRIBE through (or hears what Redis sends it
 * only once the test lets that through).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: StandaloneRedis;
let link: Link;
let late: TestSwitchyard;
let other: TestSwitchyard;
const events = systemKeys("switchyard").events;

beforeAll(async () => {
  redis = await startStandaloneRedis();
  link = await startLink(redis.socketPath);
  late = await startSwitchyard({ target: { kind: "standalone", url: `redis://${link.address}` } });
  other = await startSwitchyard(redis);
});
afterAll(async () => {
  await other?.stop();
  await late?.stop();
  await link?.close();
  await redis?.stop();
});

/** A reliable queue with a recovery set. */
const declaration = (name: string) => ({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });

/** The queue, declared through `other` and known to `late`, with one item leased through `late`. */
async function leasedOnLate(name: string) {
  await other.client.createQueue(declaration(name));
  await expect.poll(() => late.app.queues.registry.cached(name)?.mode).toBe("reliable");
  await other.client.enqueue(name, ["old"]);
  const stream = late.client.lease(name, 1);
  expect(Buffer.from((await stream.take(1))[0].payload).toString()).toBe("old");
  return stream;
}

it("a stream open on a queue deleted and declared again while the instance did not listen ends once it reads the declarations again", async () => {
  const Q = "{missed}";
  const before = await leasedOnLate(Q);

  // late's pub/sub connection is made again; its SUBSCRIBE waits in the link.
  const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
  await redis.plain.client("KILL", "TYPE", "pubsub");
  const held = await subscribing;
  expect((await redis.plain.pubsub("NUMSUB", events))[1]).toBe(1); // only other listens

  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue(declaration(Q));
  await other.client.enqueue(Q, ["new"]);

  held.release();
  // The old declaration's stream ends, as the delete would have ended it, and takes nothing of the new queue.
  expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
  expect(await redis.plain.llen(Q)).toBe(1);
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  // A stream opened now takes the new queue's item.
  const after = late.client.lease(Q, 1);
  const [item] = await after.take(1);
  expect(Buffer.from(item.payload).toString()).toBe("new");
  after.ack(item.leaseToken);
  await after.close();
  expect(await after.ended).toBeUndefined();
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
});

it("a stream open on a queue whose delete was missed but whose new declaration was heard ends when it is heard", async () => {
  const Q = "{half-heard}";
  const before = await leasedOnLate(Q);

  const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
  await redis.plain.client("KILL", "TYPE", "pubsub");
  const held = await subscribing;
  await other.client.deleteQueue(Q, { purge: true });
  // The SUBSCRIBE runs now, so late hears the declaration, but not the delete made before it.
  held.forward();
  await expect.poll(async () => (await redis.plain.pubsub("NUMSUB", events))[1]).toBe(2);
  await other.client.createQueue(declaration(Q));
  await expect.poll(() => held.replies.includes('"op":"put"')).toBe(true);
  expect(held.replies).not.toContain('"op":"delete"');

  held.release();
  expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
  expect(late.app.queues.registry.cached(Q)?.mode).toBe("reliable");
});

/** late's pub/sub connection made again with its SUBSCRIBE held in the link; the hold. */
async function deafen() {
  const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
  await redis.plain.client("KILL", "TYPE", "pubsub");
  return subscribing;
}

it("a stream open on a queue deleted and declared again ends when a later change of the new declaration is what it hears first", async () => {
  const Q = "{paused-after}";
  const before = await leasedOnLate(Q);
  const held = await deafen();
  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue(declaration(Q));
  await other.client.enqueue(Q, ["new"]);
  held.forward(); // listening from here: the delete and the declaration were missed
  await expect.poll(async () => (await redis.plain.pubsub("NUMSUB", events))[1]).toBe(2);
  await other.client.pauseQueue(Q);
  await expect.poll(() => held.replies.includes('"paused":true')).toBe(true);

  held.release();
  expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
  expect(late.app.queues.registry.cached(Q)?.paused).toBe(true);
  await other.client.resumeQueue(Q);
  expect(await redis.plain.llen(Q)).toBe(1);
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
});

it("reads the declarations again while Redis is out of memory", async () => {
  const Q = "{out-of-memory}";
  const before = await leasedOnLate(Q);
  const held = await deafen();
  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue(declaration(Q));
  await other.client.enqueue(Q, ["new"]);
  await redis.plain.config("SET", "maxmemory-policy", "noeviction");
  await redis.plain.config("SET", "maxmemory", "1");
  try {
    held.release();
    expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
  } finally {
    await redis.plain.config("SET", "maxmemory", "0");
  }
  expect(await redis.plain.llen(Q)).toBe(1);
});

it("tries a failed read of every declaration again until one succeeds", async () => {
  const Q = "{read-fails}";
  const before = await leasedOnLate(Q);
  const held = await deafen();
  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue(declaration(Q));
  // The version counter made unreadable (a hash where a number is kept): late's read fails.
  const version = systemKeys("switchyard").queuesVersion;
  const counter = await redis.plain.get(version);
  await redis.plain.del(version);
  await redis.plain.hset(version, "x", "1");
  const failedScripts = async () => Number(/cmdstat_evalsha:.*failed_calls=(\d+)/.exec(String(await redis.plain.info("commandstats")))?.[1] ?? 0);
  const failedBefore = await failedScripts();
  try {
    held.release();
    await expect.poll(failedScripts).toBeGreaterThan(failedBefore);
  } finally {
    await redis.plain.del(version);
    await redis.plain.set(version, counter!);
  }
  const stillOpen = await Promise.race([before.ended.then(() => "ended"), new Promise((ok) => setImmediate(() => ok("open")))]);
  expect(stillOpen).toBe("open");
  // The next try, a second later on late's clock, reads them.
  await (late.clock as ManualClock).advance(1000);
  expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
});

it("a change written by an instance of the version before incarnations (no id, same create time) ends no stream", async () => {
  const Q = "{older-instance}";
  const before = await leasedOnLate(Q);
  const keys = systemKeys("switchyard");
  // What that version's UpdateQueue writes: the declaration rebuilt without the field, and its event.
  const { incarnation, ...stored } = JSON.parse((await redis.plain.hget(keys.queues, Q))!) as Record<string, unknown>;
  expect(incarnation).toMatch(/^[\w-]{16}$/);
  const json = JSON.stringify({ ...stored, maxDeliveries: 7 });
  await redis.plain.hset(keys.queues, Q, json);
  const version = await redis.plain.incr(keys.queuesVersion);
  await redis.plain.publish(keys.events, `{"op":"put","name":"${Q}","version":${version},"config":${json}}`);
  await expect.poll(() => late.app.queues.registry.cached(Q)?.maxDeliveries).toBe(7);
  const ended = await Promise.race([before.ended.then(() => "ended"), new Promise((ok) => setTimeout(() => ok("open"), 200))]);
  expect(ended).toBe("open");
  await before.close();
});

it("a DeleteQueue that read the declaration before it was deleted and declared again elsewhere leaves the new one", async () => {
  const Q = "{delete-race}";
  await other.client.createQueue(declaration(Q));
  await expect.poll(() => late.app.queues.registry.cached(Q)?.name).toBe(Q);
  // late's undeclare.lua call waits in the link while other deletes the queue and declares it with other keys.
  // (As EVAL with its text the first time, as EVALSHA after.)
  const undeclaring = (chunk: Buffer) => /evalsha|Removes a queue declaration/i.test(chunk.toString("latin1")) && chunk.toString("latin1").includes(systemKeys("switchyard").queueKeys);
  const holding = link.hold(undeclaring);
  const deleting = late.client.deleteQueue(Q, { purge: true }).then(() => undefined, (err: grpc.ServiceError) => err);
  const held = await holding;
  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue({ ...declaration(Q), processingList: `${Q}:elsewhere` });
  await other.client.enqueue(Q, ["new"]);
  held.release();
  const refused = await deleting;
  expect(refused?.code).toBe(grpc.status.UNAVAILABLE);
  expect(refused?.details).toContain("declared again while this delete ran");
  expect(JSON.parse((await redis.plain.hget(systemKeys("switchyard").queues, Q))!).processingList).toBe(`${Q}:elsewhere`);
  expect(await redis.plain.hget(systemKeys("switchyard").queueKeys, `${Q}:elsewhere`)).toBe(Q);
  expect(await redis.plain.llen(Q)).toBe(1);
});

it("a stored declaration that does not parse holds up no other in a full read", async () => {
  const Q = "{beside-junk}";
  const keys = systemKeys("switchyard");
  await redis.plain.hset(keys.queues, "{junk}", "not json");
  try {
    const before = await leasedOnLate(Q);
    const held = await deafen();
    await other.client.deleteQueue(Q, { purge: true });
    await other.client.createQueue(declaration(Q));
    held.release();
    expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);
  } finally {
    await redis.plain.hdel(keys.queues, "{junk}");
  }
});

it("a stream opened after the queue was deleted and declared again elsewhere survives the late events; one opened before ends", async () => {
  const Q = "{redeclared}";
  await other.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  await expect.poll(() => late.app.queues.registry.cached(Q)?.name).toBe(Q);
  await other.client.enqueue(Q, ["old"]);
  const before = late.client.lease(Q, 1);
  expect(Buffer.from((await before.take(1))[0].payload).toString()).toBe("old");

  // late's pub/sub connection is made again and subscribes; what Redis sends it then is held.
  const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
  await redis.plain.client("KILL", "TYPE", "pubsub");
  const held = await subscribing;
  held.forward();
  // Both instances listen again in Redis (other's connection is not held).
  await expect.poll(async () => (await redis.plain.pubsub("NUMSUB", events))[1]).toBe(2);

  await other.client.deleteQueue(Q, { purge: true });
  await other.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  await expect.poll(() => held.replies.includes('"op":"delete"') && held.replies.includes('"op":"put"')).toBe(true);

  const after = late.client.lease(Q, 1);
  await other.client.enqueue(Q, ["new"]);
  const [first] = await after.take(1);
  expect(Buffer.from(first.payload).toString()).toBe("new");
  // The stream on the old declaration ended when the new one was read.
  expect((await before.ended)?.code).toBe(grpc.status.NOT_FOUND);

  held.release(); // the delete and the declaration, late
  await other.client.enqueue(Q, ["newer"]);
  after.ack(first.leaseToken);
  const [second] = await after.take(1);
  expect(Buffer.from(second.payload).toString()).toBe("newer");
  after.ack(second.leaseToken);
  await after.close();
  expect(await after.ended).toBeUndefined();
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
});
