/**
 * A settle that frees a stream's credit carries the lease that credit asks
 * for (settle-lease.lua): one script call per ack where a worker at credit 1
 * used to cost two (settle, then lease), and the credit is free as the settle
 * goes out, not when its answer is back. What must not change: a settle whose
 * call Redis refuses leaves its delivery held by its stream, as before, and the
 * pump leases again afterwards.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import { queueKeys } from "../../src/redis/keys.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

/** Script calls (EVALSHA and EVAL) the node holding `key` has run so far. */
async function scriptCalls(key: string): Promise<number> {
  const info = await t.redis.nodeFor(key).info("commandstats");
  let calls = 0;
  for (const m of info.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) calls += Number(m[1]);
  return calls;
}

describe("a settle that frees credit", () => {
  it("carries the next lease: one script call per ack at credit 1, every item delivered once, in order", async () => {
    const { sy, redis } = t;
    const Q = "{refill}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: durationFromMs(60_000) });
    const payloads = ["a", "b", "c", "d", "e"];
    await sy.client.enqueue(Q, payloads);
    const lease = sy.client.lease(Q, 1);
    const got: Delivery[] = [await lease.take(1).then(([d]) => d)];
    const before = await scriptCalls(Q);
    for (let i = 1; i < payloads.length; i++) {
      lease.ack(got[i - 1].leaseToken);
      got.push(...(await lease.take(1)));
    }
    expect(await scriptCalls(Q)).toBe(before + payloads.length - 1);
    expect(got.map((d) => Buffer.from(d.payload).toString())).toEqual(payloads);
    expect(new Set(got.map((d) => d.fence)).size).toBe(payloads.length);
    expect(got.every((d) => d.deliveryCount === 1)).toBe(true);

    // The last ack finds the queue empty: it leases nothing, and the item left is acked for good.
    lease.ack(got.at(-1)!.leaseToken);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).processing).toBe(0n);
    expect(await redis.plain.llen(Q)).toBe(0);
    // A new item still reaches the waiting stream.
    await sy.client.enqueue(Q, ["f"]);
    const [f] = await lease.take(1);
    expect(Buffer.from(f.payload).toString()).toBe("f");
    lease.ack(f.leaseToken);
    await lease.close();
  });

  it("that Redis refuses stays held by its stream; acking it then frees the credit, and the next item comes", async () => {
    const { sy, redis } = t;
    const Q = "{refill-refused}";
    const processing = `${Q}.processing`;
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, processingList: processing });
    await sy.client.enqueue(Q, ["first", "second"]);
    const lease = sy.client.lease(Q, 1);
    const [first] = await lease.take(1);
    const streams = (sy.app.queues as unknown as { streams: Set<LeaseStream> }).streams;
    const [stream] = [...streams].filter((s) => s.queue === Q);
    // A retry puts the item back through the delayed set's key: another type there refuses the whole call.
    const { delayed } = queueKeys(Q, "", "", "");
    await redis.plain.set(delayed, "not a sorted set");
    const refused = new Promise<number>((ok) => lease.onSettleResult((r) => r.leaseToken === first.leaseToken && ok(r.code)));
    lease.retry(first.leaseToken, { delayMs: 1000 });
    expect(await refused).not.toBe(0);
    // Still this stream's, its credit taken: "second" stays in the queue.
    expect([...stream.held.keys()]).toEqual([first.leaseToken]);
    expect(stream.settling.size).toBe(0);
    expect(await redis.plain.llen(processing)).toBe(1);
    expect(await redis.plain.llen(Q)).toBe(1);
    await redis.plain.del(delayed);
    lease.ack(first.leaseToken);
    const [second] = await lease.take(1);
    expect(Buffer.from(second.payload).toString()).toBe("second");
    expect(second.deliveryCount).toBe(1);
    lease.ack(second.leaseToken);
    await expect.poll(() => redis.plain.llen(processing)).toBe(0);
    expect(await redis.plain.llen(Q)).toBe(0);
    await lease.close();
  });
});
