/**
 * A Lease stream opened after a DeleteQueue and CreateQueue made through
 * another instance, whose change events have not reached this one yet: it opens
 * on the new declaration, and the events, come late, do not end it. A stream
 * opened on the old declaration ends as the delete says. Found by the model
 * tests at 50 × 150 steps, seed 346: the late delete ended the new stream (its
 * dispatcher closed; the model saw a stream with credit and ready items stall).
 *
 * Instance `late` reaches Redis through a link. Its pub/sub connection is made
 * again (CLIENT KILL TYPE pubsub) and held: its SUBSCRIBE runs, and what Redis
 * sends it from then on, the change events among it, stays in the link until
 * the test lets it through.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const Q = "{redeclared}";
let redis: StandaloneRedis;
let link: Link;
let late: TestSwitchyard;
let other: TestSwitchyard;

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

it("a stream opened after the queue was deleted and declared again elsewhere survives the late events; one opened before ends", async () => {
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
  const events = systemKeys("switchyard").events;
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
