/**
 * A SIMPLE queue's deliveries are the worker's once popped (at most once):
 * what runWorker kept ready must still run when its stream ends while the
 * worker lives, and a release must never push back an item whose ack is on
 * its way (it would run twice). Found by the review of SIMPLE releases.
 */
import { describe, expect, it } from "vitest";
import { QueueMode, type Delivery, type SettleResult } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { runWorker } from "../../src/client/worker.js";
import { credits, text } from "../helpers/prefetch.js";
import { startProxy } from "../helpers/proxy.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

describe("a SIMPLE release behind an ack with replies", () => {
  it("is refused, and the acked item is not pushed back to run again", async () => {
    const S = "{sr-reply}", R = "{sr-reply.out}";
    await t.sy.client.createQueue({ name: S, mode: QueueMode.SIMPLE });
    await t.sy.client.createQueue({ name: R, mode: QueueMode.SIMPLE });
    await t.sy.client.enqueue(S, ["once"]);
    const lease = t.sy.client.lease(S, 1);
    try {
      const [d] = await lease.take(1);
      lease.setCredit(0);
      const results: SettleResult[] = [];
      lease.onSettleResult((r) => results.push(r));
      // The ack's reply takes a Redis round trip; the release right behind it must not find the item still held.
      lease.ack(d.leaseToken, { queue: R, items: ["reply"] });
      lease.release([d.leaseToken]);
      await expect.poll(() => results.map((r) => [r.leaseToken, r.reason])).toEqual([[d.leaseToken, "LEASE_NOT_HELD"]]);
      await expect.poll(() => t.redis.plain.llen(R)).toBe(1);
      expect(await t.redis.plain.llen(S)).toBe(0);
    } finally {
      await lease.close();
    }
  });
});

describe("runWorker on a SIMPLE queue whose stream is cut while the worker lives", () => {
  it("still runs what it kept ready (nothing else will), lets the running handler finish unaborted, and enqueues its reply", async () => {
    const S = "{sr-cut}", R = "{sr-cut.out}";
    await t.sy.client.createQueue({ name: S, mode: QueueMode.SIMPLE });
    await t.sy.client.createQueue({ name: R, mode: QueueMode.SIMPLE });
    await t.sy.client.enqueue(S, ["j0", "j1", "j2", "j3", "j4"]);
    const proxy = await startProxy(t.sy.address);
    const client = new SwitchyardClient(proxy.address);
    // Deliveries that reached the worker: the server popped j1..j3 before they crossed the proxy, and a cut
    // before they arrive loses them (at most once), so the cut waits for them.
    let received = 0;
    const lease = client.lease.bind(client);
    client.lease = (...args: Parameters<typeof lease>) => {
      const session = lease(...args);
      const nextBatch = session.nextBatch.bind(session);
      session.nextBatch = async () => {
        const batch = await nextBatch();
        received += batch.length;
        return batch;
      };
      return session;
    };
    const started: Delivery[] = [];
    let finishFirst!: () => void;
    let aborted = false;
    const errors: unknown[] = [];
    const worker = runWorker({
      client, queue: S, concurrency: 1, prefetch: 3, prefetchMs: Infinity, stopGraceMs: 0, onError: (err) => errors.push(err),
      handler: (d, ctx) => {
        started.push(d);
        if (started.length > 1) return;
        ctx.signal.addEventListener("abort", () => (aborted = true));
        return new Promise((ok) => (finishFirst = () => ok({ reply: { queue: R, items: ["from j0"] } })));
      },
    });
    try {
      // j0 runs, j1..j3 are kept ready, j4 is still in Redis.
      await expect.poll(() => t.redis.plain.llen(S)).toBe(1);
      await expect.poll(() => received).toBe(4);
      expect(started.map(text)).toEqual(["j0"]);
      expect(proxy.cut()).toBeGreaterThan(0);
      // The cut ended the stream, on both sides (its items are gone from Redis: nobody else gets them).
      await expect.poll(() => credits(t.sy, S), { timeout: 5000 }).toEqual([]);
      await expect.poll(() => errors.length, { timeout: 5000 }).toBeGreaterThan(0);
      finishFirst();
      // j1..j3 run here after all, then j4 through the new stream; each once.
      await expect.poll(() => started.map(text), { timeout: 10_000 }).toEqual(["j0", "j1", "j2", "j3", "j4"]);
      expect(aborted).toBe(false);
      // j0's reply went by a unary Ack (its stream was gone).
      await expect.poll(() => t.redis.plain.llen(R)).toBe(1);
      expect(await t.redis.plain.llen(S)).toBe(0);
    } finally {
      finishFirst?.();
      await worker.stop();
      client.close();
      await proxy.close();
    }
  });
});
