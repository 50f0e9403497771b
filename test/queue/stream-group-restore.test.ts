/**
 * A lease call that finds its group gone creates the groups again as the
 * declaration stands in Redis, not as the instance last heard of it: a group
 * deleted through another instance, while this one did not hear of it, stays
 * deleted, and this instance's streams on it end; and a restore that a
 * DeleteQueue overtakes leaves nothing behind (third break review of issue 16).
 * Instance `late` is made deaf as in missed-redeclare.test.ts.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { QueueConfig } from "../../src/queue/declaration.js";
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

const groupsInRedis = async (q: string) => ((await redis.plain.xinfo("GROUPS", q)) as unknown[][]).map((g) => String(g[1])).sort();

it("does not create again a group deleted through an instance this one did not hear", { timeout: 30_000 }, async () => {
  const Q = "{restore-deleted}";
  await other.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "h", startId: "0" }] });
  await expect.poll(() => late.app.queues.registry.cached(Q)?.groups.length).toBe(2);
  await other.client.enqueue(Q, ["1", "2", "3"]);
  const onH = late.client.lease(Q, 10, { group: "h" });
  const got = await onH.take(3);
  await Promise.all(got.map((d) => late.client.ack(d.leaseToken)));

  // late stops hearing change events: its SUBSCRIBE waits in the link.
  const subscribing = link.hold((chunk) => chunk.toString("latin1").includes("\r\nsubscribe\r\n"));
  await redis.plain.client("KILL", "TYPE", "pubsub");
  const held = await subscribing;
  try {
    await other.client.deleteConsumerGroup(Q, "h");
    expect(late.app.queues.registry.cached(Q)?.groups.map((g) => g.name)).toEqual(["g", "h"]); // late has not heard
    // An append wakes late's pump of h: its lease call finds NOGROUP, and the restore reads the declaration.
    await other.client.enqueue(Q, ["4"]);
    const err = await onH.ended;
    expect(`${err?.code} ${err?.details}`).toMatch(/^5 .*no consumer group "h"/);
    expect(await groupsInRedis(Q)).toEqual(["g"]);
    expect(late.app.queues.registry.cached(Q)?.groups.map((g) => g.name)).toEqual(["g"]);
    // Nothing of h is left in the counts hash (its deliveries were acked).
    expect((await redis.plain.hkeys(`${Q}.leases`)).filter((f) => f.includes(":h:"))).toEqual([]);
  } finally {
    held.forward();
    held.release();
  }
  // The declared group still works through late: it reads every entry since its creation.
  const onG = late.client.lease(Q, 10, { group: "g" });
  await other.client.enqueue(Q, ["5"]);
  const all = await onG.take(5);
  expect(all.map((d) => Buffer.from(d.payload).toString())).toEqual(["1", "2", "3", "4", "5"]);
  await Promise.all(all.map((d) => late.client.ack(d.leaseToken)));
  await onG.close();
});

it("undoes what a restore made for a queue deleted (and purged) between its read of the declaration and its groups", { timeout: 30_000 }, async () => {
  const Q = "{restore-overtaken}";
  await other.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "h", startId: "0" }] });
  const lease = late.client.lease(Q, 1, { group: "g" });
  await other.client.enqueue(Q, ["1"]);
  const [d] = await lease.take(1);
  await late.client.ack(d.leaseToken);
  // The restore's read of the declaration is followed by a DeleteQueue with purge through the other instance.
  const host = (late.app.queues as unknown as { dispatchHost: { current(n: string): Promise<QueueConfig> } }).dispatchHost;
  const current = host.current.bind(host);
  let reads = 0;
  host.current = async (name) => {
    const first = name === Q && reads++ === 0;
    const c = await current(name);
    if (first) await other.client.deleteQueue(Q, { purge: true });
    return c;
  };
  try {
    await redis.plain.del(Q); // the stream goes (as by its publish TTL) while the queue is declared
    await redis.plain.xadd(Q, "*", "payload", "2"); // an append wakes late's pump: NOGROUP, a restore
    const err = await lease.ended;
    expect(err?.code).toBe(5); // the queue is gone
    await expect.poll(() => reads).toBe(2); // the restore's read after (the stream ended on the delete's event, before it)
    await expect.poll(() => redis.plain.exists(Q)).toBe(0);
  } finally {
    host.current = current;
  }
  // The name is free for another queue of another mode.
  await other.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  await other.client.deleteQueue(Q, { purge: true });
});
