/** Graceful shutdown (SPEC S5): drain, settle within the grace, return the rest. */
import { describe, expect, it, onTestFinished } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ServingStatus } from "../../src/grpc/health.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import type { Config } from "../../src/config.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

/**
 * A Redis and an instance of the test's own, with reliable queue `Q` holding `items`: both stop once the
 * test ends, failed or not (the instance first; a stop it made itself stands).
 */
async function instanceWith(Q: string, items: string[], config: Partial<Config> = {}) {
  const redis = await startRedis();
  let sy: TestSwitchyard | undefined;
  onTestFinished(async () => {
    await sy?.stop();
    await redis.stop();
  });
  sy = await startSwitchyard(redis, { config });
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  const ids = await sy.client.enqueue(Q, items);
  return { redis, sy, ids };
}

describe("graceful shutdown", () => {
  it("goes NOT_SERVING, drains streams, takes settles within the grace and returns what is left", async () => {
    const Q = "{drain}";
    const { redis, sy, ids } = await instanceWith(Q, ["a", "b", "c", "d"], { shutdownGraceMs: 1000 });
    const lease = sy.client.lease(Q, 3);
    const held = await lease.take(3);
    expect(await redis.plain.llen(Q)).toBe(1);

    const stopping = sy.app.stop();
    expect(sy.app.health.status("")).toBe(ServingStatus.NOT_SERVING);
    await expect.poll(() => lease.drained).toBe(true);
    // A new stream is refused while draining, and nothing more is delivered to the old one.
    const late = sy.client.lease(Q, 1);
    await expect(late.opened).rejects.toMatchObject({ code: 14 });
    // Settles still count during the grace: ack two, keep one.
    lease.ack(held[0].leaseToken);
    await sy.client.ack(held[1].leaseToken);
    await stopping;
    expect(await lease.ended).toBeUndefined(); // ended cleanly
    // The one left unsettled went back to the front of the queue; nothing was lost.
    const queued = await redis.plain.lrangeBuffer(Q, 0, -1);
    expect(queued.map((v) => v.includes(Buffer.from("c")) || v.includes(Buffer.from("d")))).toEqual([true, true]);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(ids).toHaveLength(4);
  });

  it("ends at once when every held item is settled before the grace runs out", async () => {
    const { redis, sy } = await instanceWith("{quick}", ["x"], { shutdownGraceMs: 60_000 });
    const lease = sy.client.lease("{quick}", 1);
    const [d] = await lease.take(1);
    const started = Date.now();
    const stopping = sy.app.stop();
    await expect.poll(() => lease.drained).toBe(true);
    lease.ack(d.leaseToken);
    await stopping;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await redis.plain.llen("{quick}.processing")).toBe(0);
    expect(await redis.plain.llen("{quick}")).toBe(0);
  });

  it("refuses a lease stream whose open was reading its queue's declaration when the shutdown began", async () => {
    const Q = "{late-open}";
    const { redis, sy } = await instanceWith(Q, ["a", "b", "c"]);
    const queues = sy.app.queues;
    const open = queues.openStream.bind(queues);
    let stopping: Promise<void> | undefined;
    queues.openStream = (...args: Parameters<typeof open>) => {
      const opening = open(...args); // past the draining check, its declaration read in flight
      stopping = sy.app.stop();
      return opening;
    };
    const lease = sy.client.lease(Q, 2);
    await expect(lease.opened).rejects.toMatchObject({ code: 14 });
    await stopping;
    // Nothing was leased for a stream no stop would close: every item is still ready for another instance.
    expect([await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([3, 0]);
  });

  it("stays in the live instances through a second stop while a settle sent before the first is unanswered", async () => {
    const Q = "{settle-unanswered}";
    const { redis, sy } = await instanceWith(Q, ["a", "b"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    const queues = sy.app.queues as unknown as {
      streams: Set<LeaseStream>;
      settler: { send(...args: unknown[]): Promise<unknown>; refill(...args: unknown[]): void };
      instances: { id: string };
      stop(returnWithinMs?: number): Promise<void>;
    };
    // The ack goes out with the next lease beside it (its delivery then counts as settling), and its call
    // stays unanswered: as a call to a hung cluster node would, while other nodes answer.
    const { settler } = queues;
    const send = settler.send.bind(settler);
    let fail!: (err: Error) => void;
    settler.send = (...args: unknown[]) => {
      if (!(args[3] as { action: string }[]).some((op) => op.action === "ack")) return send(...args);
      const call = new Promise((_, reject) => (fail = reject));
      call.catch(() => undefined);
      settler.refill(args[0], args[3], { list: () => call, stream: () => call });
      return call;
    };
    lease.ack(a.leaseToken);
    await expect.poll(() => [...queues.streams].some((s) => s.settling.size > 0)).toBe(true);
    const alive = () => redis.plain.zscore(systemKeys("switchyard").alive, queues.instances.id);
    await queues.stop(200);
    expect(await alive()).not.toBeNull();
    // The app stops the queues again after drain's stop: the stream the first closed still waits for its answer.
    await queues.stop(200);
    expect(await alive()).not.toBeNull();
    fail(new Error("Connection is closed."));
  });
});
