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

describe("a STREAM queue's settle that frees credit (stream-settle-lease.lua)", () => {
  const text = (d: Delivery) => Buffer.from(d.payload).toString();

  it("carries its group's next read: one script call per ack at credit 1; a retry's entry is the next one read, counted", async () => {
    const { sy } = t;
    const Q = "{refill-st}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }], minIdle: durationFromMs(60_000) });
    await sy.client.enqueue(Q, ["a", "b", "c", "d"]);
    const lease = sy.client.lease(Q, 1, { group: "g" });
    const got: Delivery[] = await lease.take(1);
    const before = await scriptCalls(Q);
    lease.ack(got[0].leaseToken);
    got.push(...(await lease.take(1)));
    lease.ack(got[1].leaseToken);
    got.push(...(await lease.take(1)));
    expect(await scriptCalls(Q)).toBe(before + 2);
    // A retry due at once: the same call hands "c" back and reads it again, before "d".
    lease.retry(got[2].leaseToken, { reason: "flaky", delayMs: 0 });
    got.push(...(await lease.take(1)));
    expect(await scriptCalls(Q)).toBe(before + 3);
    expect(got.map((d) => [text(d), d.deliveryCount, d.lastError])).toEqual([["a", 1, ""], ["b", 1, ""], ["c", 1, ""], ["c", 2, "flaky"]]);
    lease.ack(got[3].leaseToken);
    const [d] = await lease.take(1);
    expect([text(d), d.deliveryCount]).toEqual(["d", 1]);
    lease.ack(d.leaseToken);
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).groups[0]?.pending).toBe(0n);
    await lease.close();
  });

  it("acks of two groups in one turn: each group's stream gets its next entry once, and every entry is acked", async () => {
    const { sy } = t;
    const Q = "{refill-st2}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }, { name: "h", startId: "0" }] });
    await sy.client.enqueue(Q, ["a", "b", "c"]);
    const g = sy.client.lease(Q, 1, { group: "g" });
    const h = sy.client.lease(Q, 1, { group: "h" });
    const seen: Record<string, string[]> = { g: [], h: [] };
    for (let i = 0; i < 3; i++) {
      const [dg] = await g.take(1);
      const [dh] = await h.take(1);
      seen.g.push(text(dg));
      seen.h.push(text(dh));
      // Both acks go out in one turn: one settle batch for the queue, holding both groups' deliveries.
      g.ack(dg.leaseToken);
      h.ack(dh.leaseToken);
    }
    expect(seen).toEqual({ g: ["a", "b", "c"], h: ["a", "b", "c"] });
    await expect.poll(async () => (await sy.client.getQueueStats(Q)).groups.map((x) => x.pending)).toEqual([0n, 0n]);
    await Promise.all([g.close(), h.close()]);
  });
});
