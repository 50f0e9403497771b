/**
 * PauseQueue and ResumeQueue across instances (issue 14): a pause asked of one
 * instance stops deliveries on every instance within a second, while enqueues
 * still land; a resume restarts them; no item is lost or delivered twice.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../src/client/client.js";
import { onCluster, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let instances: TestSwitchyard[];
beforeAll(async () => {
  redis = await startRedis();
  instances = await Promise.all([0, 1, 2].map(() => startSwitchyard(redis)));
});
afterAll(async () => {
  await Promise.all(instances.map((sy) => sy.stop()));
  await redis.stop();
});

/** A worker on one instance that acks every delivery at once and notes its id. */
function acking(session: LeaseSession, seen: string[]): Promise<void> {
  return (async () => {
    for await (const d of session) {
      seen.push(d.id);
      session.ack(d.leaseToken);
    }
  })();
}

describe("PauseQueue across three instances", () => {
  it("stops deliveries on all of them within a second, keeps taking enqueues, and resume delivers everything once", async () => {
    const Q = "{paused-everywhere}";
    const [a, b, c] = instances;
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const seen: string[] = [];
    const sessions = instances.map((sy) => sy.client.lease(Q, 10));
    const workers = sessions.map((s) => acking(s, seen));
    await Promise.all(sessions.map((s) => s.opened));

    const before = await c.client.enqueue(Q, Array.from({ length: 30 }, (_, i) => `before-${i}`));
    await expect.poll(() => seen.length).toBe(30);

    const paused = await b.client.pauseQueue(Q);
    expect(paused.paused).toBe(true);
    const pausedAt = Date.now();
    // Every instance has the pause (it came over pub/sub) within a second of the answer.
    await expect
      .poll(() => instances.map((sy) => sy.app.queues.registry.cached(Q)?.paused), { timeout: 1000, interval: 10 })
      .toEqual([true, true, true]);
    expect(Date.now() - pausedAt).toBeLessThan(1000);

    // Enqueue still lands, through any instance.
    const during = [...(await a.client.enqueue(Q, Array.from({ length: 15 }, (_, i) => `during-a-${i}`))),
      ...(await c.client.enqueue(Q, Array.from({ length: 15 }, (_, i) => `during-c-${i}`)))];
    // A new stream on each instance opens (told it is paused) and gets nothing: opening one kicks the
    // instance's dispatcher, which would send its lease script on the instance's Redis connection ahead
    // of the stats read that follows, so the stats show what a lease would have taken.
    const probes = instances.map((sy) => sy.client.lease(Q, 30));
    for (const [i, sy] of instances.entries()) {
      expect((await probes[i].opened).paused).toBe(true);
      expect(await sy.client.getQueueStats(Q)).toMatchObject({ ready: 30n, processing: 0n, paused: true });
    }
    expect(seen).toHaveLength(30);
    const probed: string[] = [];
    const probeWorkers = probes.map((s) => acking(s, probed));

    expect((await c.client.resumeQueue(Q)).paused).toBe(false);
    await expect.poll(() => seen.length + probed.length, { timeout: 10_000 }).toBe(60);
    const all = [...seen, ...probed];
    expect([...all].sort()).toEqual([...before, ...during].sort());
    expect(new Set(all).size).toBe(60);
    await expect.poll(() => a.client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n, deadLetter: 0n, paused: false });

    await Promise.all([...sessions, ...probes].map((s) => s.close()));
    await Promise.all([...workers, ...probeWorkers]);
  });
});

// Standalone only: on a cluster, ioredis's ClusterSubscriber makes its lost connection again on
// another node and subscribes it itself, telling the instance nothing, so there is no moment to
// read the declarations afresh (a pause published in that gap is learnt when the command
// connection reconnects; see the closing note of issue 14).
describe.skipIf(onCluster)("PauseQueue while an instance's pub/sub connection is being made again", () => {
  it("reaches that instance too: it reads the declarations afresh once it listens again", async () => {
    const Q = "{paused-missed}";
    const [a, b] = instances;
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    // Redis drops every pub/sub connection (as an output buffer limit or CLIENT KILL does); the pause is published
    // while they are gone, so no instance receives its event.
    expect(await redis.plain.client("KILL", "TYPE", "pubsub")).toBeGreaterThanOrEqual(instances.length);
    await b.client.pauseQueue(Q);
    await expect.poll(() => instances.map((sy) => sy.app.queues.registry.cached(Q)?.paused), { timeout: 5000 }).toEqual([true, true, true]);
    const probe = a.client.lease(Q, 1);
    expect((await probe.opened).paused).toBe(true);
    await a.client.enqueue(Q, ["held back"]);
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 1n, processing: 0n, paused: true });
    await probe.close();
  });
});
