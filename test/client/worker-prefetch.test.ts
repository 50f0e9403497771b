/**
 * runWorker's prefetch: deliveries kept ready beyond the running handlers,
 * and given back uncounted (LeaseRequest.release)
 * when the worker stops or the server drains.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import { ManualClock } from "../../src/clock.js";
import { credits, held, next, text } from "../helpers/prefetch.js";
import { startSwitchyard, useSwitchyard } from "../helpers/switchyard.js";

/** One Redis and one Switchyard for the file: `t.sy`, `t.redis`. */
const t = useSwitchyard();


describe("prefetch on a reliable queue", () => {
  it("keeps `prefetch` deliveries ready and runs no more than `concurrency` handlers", async () => {
    const Q = "{pf-ready}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3", "j4", "j5", "j6"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 2, prefetch: 3, prefetchMs: Infinity, handler: h.handler });
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([5]);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(5n);
      expect(h.started.map(text)).toEqual(["j0", "j1"]);
      // A handler that finishes starts the next delivery that waited, in delivery order.
      h.finish[1]();
      await expect.poll(() => h.started.map(text)).toEqual(["j0", "j1", "j2"]);
      h.finish[0]();
      await expect.poll(() => h.started.map(text)).toEqual(["j0", "j1", "j2", "j3"]);
      // The two acks freed two units of credit: the stream holds 5 again (2 running, 3 ready).
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(5n);
      expect((await t.sy.client.getQueueStats(Q)).ready).toBe(0n);
    } finally {
      for (const ok of h.finish) ok();
      await worker.stop();
    }
  });

  it("stop() gives back what never started, uncounted and in order, ahead of the rest of the queue", async () => {
    const Q = "{pf-stop}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3", "j4"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 1, prefetch: 2, prefetchMs: Infinity, stopGraceMs: 50, clock: t.sy.clock, handler: h.handler });
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(3n);
    expect(h.started.map(text)).toEqual(["j0"]);
    const stopping = worker.stop();
    // stop() waits stopGraceMs (on the test's clock) for the handler that runs.
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).ready).toBe(4n);
    await (t.sy.clock as ManualClock).advance(50);
    const unfinished = await stopping;
    expect(unfinished.map(text)).toEqual(["j0"]);
    expect(h.started.map(text)).toEqual(["j0"]);
    // j1 and j2 never reached a handler: back at the front as they were (count 1); j0's stream
    // closed while it ran, so it went back counted (its next delivery is the second).
    expect(await next(t.sy, Q, 5)).toEqual([["j0", 2], ["j1", 1], ["j2", 1], ["j3", 1], ["j4", 1]]);
  });

  it("gives back what waits when the server drains, and the running handler still settles", async () => {
    const Q = "{pf-drain}";
    const c = await startSwitchyard(t.redis, { config: { shutdownGraceMs: 60_000 } });
    try {
      await c.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
      await c.client.enqueue(Q, ["j0", "j1", "j2", "j3"]);
      const h = held();
      const errors: unknown[] = [];
      const worker = runWorker({ client: c.client, queue: Q, concurrency: 1, prefetch: 2, prefetchMs: Infinity, handler: h.handler, onError: (e) => errors.push(e) });
      await expect.poll(async () => (await c.client.getQueueStats(Q)).processing).toBe(3n);
      const draining = c.app.queues.drain(60_000);
      // j1 and j2 go back at once, while j0's handler still runs.
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(1n);
      expect((await t.sy.client.getQueueStats(Q)).ready).toBe(3n);
      h.finish[0]();
      await draining;
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).completedTotal).toBe(1n);
      await worker.stop();
      expect(h.started.map(text)).toEqual(["j0"]);
      expect(await next(t.sy, Q, 3)).toEqual([["j1", 1], ["j2", 1], ["j3", 1]]);
    } finally {
      await c.stop();
    }
  });

  it("extends the lease of a delivery that waits, so the watchdog never takes it from a live worker", async () => {
    const Q = "{pf-extend}";
    const clock = t.sy.clock as ManualClock;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(3000), recoverySet: `${Q}.claims` });
    await t.sy.client.enqueue(Q, ["j0", "j1"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 1, prefetch: 1, prefetchMs: Infinity, clock, handler: h.handler });
    try {
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(2n);
      // Ten min_idles pass while j0 runs and j1 waits: neither is recovered.
      for (let s = 0; s < 30; s++) await clock.advance(1000);
      const stats = await t.sy.client.getQueueStats(Q);
      expect([stats.ready, stats.processing, stats.deadLetter]).toEqual([0n, 2n, 0n]);
      h.finish[0]();
      await expect.poll(() => h.started.map((d) => [text(d), d.deliveryCount])).toEqual([["j0", 1], ["j1", 1]]);
      h.finish[1]();
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).completedTotal).toBe(2n);
    } finally {
      for (const ok of h.finish) ok();
      await worker.stop();
    }
  });

  it("prefetch 0 takes no more than it runs", async () => {
    const Q = "{pf-zero}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 2, prefetch: 0, prefetchMs: Infinity, handler: h.handler });
    try {
      await expect.poll(() => h.started.length).toBe(2);
      expect(credits(t.sy, Q)).toEqual([2]);
      expect((await t.sy.client.getQueueStats(Q)).ready).toBe(1n);
    } finally {
      for (const ok of h.finish) ok();
      await worker.stop();
    }
  });
});

describe("prefetch follows how quick the handlers are (prefetchMs)", () => {
  it("is off until a handler has finished: two workers with slow handlers each get one of two items", async () => {
    const Q = "{pf-fair}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const [one, two] = [held(), held()];
    const workers = [one, two].map((h) => runWorker({ client: t.sy.client, queue: Q, concurrency: 1, handler: h.handler }));
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([1, 1]);
      await t.sy.client.enqueue(Q, ["j0", "j1"]);
      await expect.poll(() => [one.started.length, two.started.length]).toEqual([1, 1]);
    } finally {
      for (const ok of [...one.finish, ...two.finish]) ok();
      await Promise.all(workers.map((w) => w.stop()));
    }
  });

  it("keeps ready what the handlers get through in prefetchMs at their average run time, at most `prefetch`", async () => {
    const Q = "{pf-adapt}";
    const clock = t.sy.clock as ManualClock;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const gates: (() => void)[] = [];
    const done: string[] = [];
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: 2, prefetch: 8, clock,
      // "slow" items run until the test has moved the clock on and let them go; the rest return at once.
      handler: (d) => {
        if (!text(d).startsWith("slow")) return void done.push(text(d));
        return new Promise<void>((ok) => gates.push(() => (done.push(text(d)), ok())));
      },
    });
    /** Runs one slow item for `ms` on the manual clock. */
    const slow = async (name: string, ms: number) => {
      await t.sy.client.enqueue(Q, [name]);
      await expect.poll(() => gates.length).toBe(done.filter((t) => t.startsWith("slow")).length + 1);
      await clock.advance(ms);
      gates[gates.length - 1]();
      await expect.poll(() => done.at(-1)).toBe(name);
    };
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([2]);
      await t.sy.client.enqueue(Q, ["q0", "q1", "q2"]);
      // Handlers returning at once (0 ms on average): 2 to run and all 8 of `prefetch` ready.
      await expect.poll(() => credits(t.sy, Q)).toEqual([10]);
      await expect.poll(() => done.length).toBe(3);
      // One 10 ms run: the average is 2 ms (0 + 10 × 0.2); 2 handlers get through 5 in 5 ms.
      await slow("slow0", 10);
      await expect.poll(() => credits(t.sy, Q)).toEqual([7]);
      // One 100 ms run lifts the average to 21.6 ms, past 2 × 5 ms: back to what it runs.
      await slow("slow1", 100);
      await expect.poll(() => credits(t.sy, Q)).toEqual([2]);
      expect(done).toEqual(["q0", "q1", "q2", "slow0", "slow1"]);
    } finally {
      for (const ok of gates) ok();
      await worker.stop();
    }
  });

  it("keeps no more ready than prefetchBytes of payload, at the payloads' average size", async () => {
    const Q = "{pf-bytes}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const done: string[] = [];
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: 1, prefetch: 8, prefetchMs: Infinity, prefetchBytes: 3000,
      handler: (d) => void done.push(text(d)),
    });
    try {
      // Nothing delivered yet, so no size known: all of `prefetch`.
      await expect.poll(() => credits(t.sy, Q)).toEqual([9]);
      await t.sy.client.enqueue(Q, ["a".repeat(1000)]);
      await expect.poll(() => done.length).toBe(1);
      // 1,000-byte payloads: 3 fit in 3,000 bytes.
      await expect.poll(() => credits(t.sy, Q)).toEqual([4]);
      await t.sy.client.enqueue(Q, ["b".repeat(20_000)]);
      await expect.poll(() => done.length).toBe(2);
      // The average is 4,800 bytes (1,000 + 19,000 × 0.2): none fits.
      await expect.poll(() => credits(t.sy, Q)).toEqual([1]);
    } finally {
      await worker.stop();
    }
  });

  it("gives back uncounted what waited 20 × prefetchMs behind a handler stuck far past the average, and keeps none ready until it finishes", async () => {
    const Q = "{pf-stale}";
    const clock = t.sy.clock as ManualClock;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const h = held();
    const quick: string[] = [];
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: 1, prefetch: 4, clock,
      handler: (d) => (text(d).startsWith("hang") ? h.handler(d) : void quick.push(text(d))),
    });
    try {
      await t.sy.client.enqueue(Q, ["q0"]);
      // One quick run (0 ms): 1 to run and all 4 of `prefetch` ready.
      await expect.poll(() => credits(t.sy, Q)).toEqual([5]);
      await t.sy.client.enqueue(Q, ["hang", "w1", "w2", "w3", "w4"]);
      await expect.poll(() => h.started.length).toBe(1);
      await clock.advance(99);
      expect(credits(t.sy, Q)).toEqual([5]);
      // 100 ms (20 × 5 ms) without a handler free: the four go back to the front, uncounted, and none is kept ready.
      await clock.advance(1);
      await expect.poll(() => credits(t.sy, Q)).toEqual([1]);
      expect(await next(t.sy, Q, 4)).toEqual([["w1", 1], ["w2", 1], ["w3", 1], ["w4", 1]]);
      expect(quick).toEqual(["q0"]);
    } finally {
      for (const ok of h.finish) ok();
      await worker.stop();
    }
  });
});

describe("prefetch elsewhere", () => {
  it("a SIMPLE queue's worker keeps items ready too, and stop() pushes back what never started, in order, at the front", async () => {
    const Q = "{pf-simple}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.SIMPLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3", "j4", "j5"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 2, prefetch: 3, prefetchMs: Infinity, stopGraceMs: 0, handler: h.handler });
    await expect.poll(() => credits(t.sy, Q)).toEqual([5]);
    await expect.poll(() => t.redis.plain.llen(Q)).toBe(1);
    expect(h.started.map(text)).toEqual(["j0", "j1"]);
    h.finish[0]();
    await expect.poll(() => h.started.map(text)).toEqual(["j0", "j1", "j2"]);
    // The ack freed a unit: j5 was popped too, behind j3 and j4.
    await expect.poll(() => t.redis.plain.llen(Q)).toBe(0);
    const unfinished = await worker.stop();
    // j1 and j2 ran and did not finish: popped, they are the worker's (at most once), not pushed back.
    expect(unfinished.map(text)).toEqual(["j1", "j2"]);
    // j3, j4 and j5 never reached a handler: back at the front, in the order they were delivered.
    expect(await next(t.sy, Q, 3)).toEqual([["j3", 1], ["j4", 1], ["j5", 1]]);
    expect(await t.redis.plain.llen(Q)).toBe(0);
  });

  it("a STREAM queue's entries that waited go back uncounted on stop(): the group reads them next with count 1", async () => {
    const Q = "pf-uploads";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }], minIdle: durationFromMs(60_000) });
    await t.sy.client.enqueue(Q, ["e0", "e1", "e2"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, group: "g", concurrency: 1, prefetch: 2, prefetchMs: Infinity, stopGraceMs: 0, handler: h.handler });
    await expect.poll(() => credits(t.sy, Q)).toEqual([3]);
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).groups[0]?.pending).toBe(3n);
    expect(h.started.map(text)).toEqual(["e0"]);
    await worker.stop();
    expect(await next(t.sy, Q, 3, "g")).toEqual([["e0", 2], ["e1", 1], ["e2", 1]]);
  });
});

describe("LeaseRequest.release", () => {
  it("refuses, each with its own result, a token the stream does not hold", async () => {
    const R = "{rel-r}";
    await t.sy.client.createQueue({ name: R, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(R, ["r0", "r1"]);
    const one = t.sy.client.lease(R, 1);
    const other = t.sy.client.lease(R, 1);
    try {
      expect((await one.opened).releases).toBe(true);
      const [mine] = await one.take(1);
      const [theirs] = await other.take(1);
      const results: { token: string; reason: string; code: number }[] = [];
      one.onSettleResult((r) => results.push({ token: r.leaseToken, reason: r.reason, code: r.code }));
      // Credit 0 first, as a stopping worker does: else the freed credit leases mine again.
      one.setCredit(0);
      one.release([theirs.leaseToken, mine.leaseToken]);
      await expect.poll(() => results.length).toBe(1);
      expect(results).toEqual([{ token: theirs.leaseToken, reason: "LEASE_NOT_HELD", code: 9 }]);
      // Mine went back; theirs is still held by the other stream.
      await expect.poll(async () => (await t.sy.client.getQueueStats(R)).ready).toBe(1n);
      expect((await t.sy.client.getQueueStats(R)).processing).toBe(1n);
      // Released twice: the second finds nothing held.
      one.release([mine.leaseToken]);
      await expect.poll(() => results.length).toBe(2);
      expect(results[1]).toEqual({ token: mine.leaseToken, reason: "LEASE_NOT_HELD", code: 9 });
    } finally {
      await Promise.all([one.close(), other.close()]);
    }
  });

  it("on a SIMPLE queue pushes the popped items back to the front, in delivery order, once, and frees their credit", async () => {
    const S = "{rel-s}";
    await t.sy.client.createQueue({ name: S, mode: QueueMode.SIMPLE });
    // A plain producer's items (no envelope): pushed back byte for byte.
    await t.redis.plain.lpush(S, "s0", "s1", "s2", "s3");
    const lease = t.sy.client.lease(S, 3);
    try {
      expect((await lease.opened).releases).toBe(true);
      const got = await lease.take(3);
      expect(got.map(text)).toEqual(["s0", "s1", "s2"]);
      const results: { token: string; reason: string; code: number }[] = [];
      lease.onSettleResult((r) => results.push({ token: r.leaseToken, reason: r.reason, code: r.code }));
      lease.setCredit(0);
      // Named out of order: they go back in the order they were delivered, ahead of s3.
      lease.release([got[2].leaseToken, got[1].leaseToken]);
      await expect.poll(() => t.redis.plain.lrange(S, 0, -1)).toEqual(["s3", "s2", "s1"]);
      // Released twice, and the one still held acked: the second release is refused, and nothing is pushed again.
      lease.release([got[1].leaseToken]);
      await expect.poll(() => results).toEqual([{ token: got[1].leaseToken, reason: "LEASE_NOT_HELD", code: 9 }]);
      await t.sy.client.ack(got[0].leaseToken);
      expect(await t.redis.plain.lrange(S, 0, -1)).toEqual(["s3", "s2", "s1"]);
      // Their credit is free: the stream takes them again, first, with their payloads as they were.
      lease.setCredit(3);
      expect((await lease.take(3)).map(text)).toEqual(["s1", "s2", "s3"]);
    } finally {
      await lease.close();
    }
  });
});
