/**
 * Review of runWorker's prefetch and LeaseRequest.release (docs/worker-protocol.md
 * "Prefetch and release"), against real Redis and gRPC: the defects found (each
 * named for what it checks) and what held.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type SettleResult } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import type { ManualClock } from "../../src/clock.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { credits, held, next, text } from "../helpers/prefetch.js";
import { startProxy } from "../helpers/proxy.js";
import { rawLease } from "../helpers/raw-lease.js";
import { startSwitchyard, useSwitchyard } from "../helpers/switchyard.js";

/** One Redis and one Switchyard for the file: `t.sy`, `t.redis`. */
const t = useSwitchyard();

const result = (r: SettleResult) => ({ token: r.leaseToken, code: r.code, reason: r.reason });

describe("defects", () => {
  it("stop() against a server that answers nothing waits for its round trip no longer than the grace (at least 2 s), then closes", async () => {
    const Q = "{pr-stop-silent}";
    const clock = t.sy.clock as ManualClock;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const proxy = await startProxy(t.sy.address);
    const client = new SwitchyardClient(proxy.address);
    const worker = runWorker({ client, queue: Q, concurrency: 1, prefetch: 1, prefetchMs: Infinity, stopGraceMs: 0, clock, handler: () => undefined });
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([2]);
      // The server's answers stop reaching the worker: the round trip after its credit 0 never comes back.
      proxy.holdReplies();
      const stopping = worker.stop();
      await expect.poll(() => credits(t.sy, Q)).toEqual([0]);
      await clock.advance(2000);
      // The worker gave up waiting and half-closed: the server ends the stream (its answer still held).
      await expect.poll(() => credits(t.sy, Q)).toEqual([]);
      proxy.restore();
      expect(await stopping).toEqual([]);
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("stop() while deliveries are on their way gives them back uncounted (the stream's close returned them counted)", async () => {
    const Q = "{pr-inflight}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const proxy = await startProxy(t.sy.address);
    const client = new SwitchyardClient(proxy.address);
    const started: string[] = [];
    const worker = runWorker({ client, queue: Q, concurrency: 1, prefetch: 2, prefetchMs: Infinity, stopGraceMs: 0, handler: (d) => void started.push(text(d)) });
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([3]);
      // The server leases three for the idle worker; they stay in the proxy while the worker stops.
      proxy.holdReplies();
      await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3"]);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(3n);
      const stopping = worker.stop();
      // The server took the worker's credit 0 (before the fix, the stream may have ended already).
      await expect.poll(() => credits(t.sy, Q).join()).toMatch(/^0?$/);
      proxy.restore();
      expect(await stopping).toEqual([]);
      expect(started).toEqual([]);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(0n);
      // No handler saw them: their next delivery is still their first.
      expect(await next(t.sy, Q, 4)).toEqual([["j0", 1], ["j1", 1], ["j2", 1], ["j3", 1]]);
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("release answers a malformed token INVALID_ARGUMENT LEASE_TOKEN_INVALID, as ack_batch does (it said LEASE_NOT_HELD)", async () => {
    const Q = "{pr-malformed}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0"]);
    const lease = t.sy.client.lease(Q, 1);
    const results: SettleResult[] = [];
    lease.onSettleResult((r) => results.push(r));
    try {
      await lease.take(1);
      lease.setCredit(0);
      lease.release(["", "garbage", "r.1.zz.abc"]);
      await expect.poll(() => results.length).toBe(3);
      expect(results.map(result)).toEqual([
        { token: "", code: 3, reason: "LEASE_TOKEN_INVALID" },
        { token: "garbage", code: 3, reason: "LEASE_TOKEN_INVALID" },
        { token: "r.1.zz.abc", code: 3, reason: "LEASE_TOKEN_INVALID" },
      ]);
      const stats = await t.sy.client.getQueueStats(Q);
      expect([stats.ready, stats.processing]).toEqual([0n, 1n]);
    } finally {
      await lease.close();
    }
  });

  it("release of a delivery whose ack went just before comes back LEASE_NOT_HELD (it was silently taken as released)", async () => {
    const Q = "{pr-ack-release}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(60_000), recoverySet: "{pr-ack-release}.claims" });
    await t.sy.client.enqueue(Q, ["j0", "j1"]);
    const lease = t.sy.client.lease(Q, 2);
    const results: SettleResult[] = [];
    lease.onSettleResult((r) => results.push(r));
    try {
      const [j0, j1] = await lease.take(2);
      lease.setCredit(0);
      // The ack goes first (the release flushes it), and is still on its way to Redis when the release arrives.
      lease.ack(j0.leaseToken);
      lease.release([j0.leaseToken, j1.leaseToken]);
      await expect.poll(() => results.length).toBe(1);
      expect(results.map(result)).toEqual([{ token: j0.leaseToken, code: 9, reason: "LEASE_NOT_HELD" }]);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).ready).toBe(1n);
      const stats = await t.sy.client.getQueueStats(Q);
      expect([stats.processing, stats.completedTotal]).toEqual([0n, 1n]);
      expect(await t.redis.plain.zcard("{pr-ack-release}.claims")).toBe(0);
    } finally {
      await lease.close();
    }
    expect(await next(t.sy, Q, 1)).toEqual([["j1", 1]]);
  });
});

describe("defects (2)", () => {
  it("STREAM entries released while a new stream's lease comes back short reach it at once, not after a blocking wait (a lost wake-up)", async () => {
    const Q = "pr-stream-wake";
    // A long blocking wait: before the fix, the released entries waited all of it.
    const c = await startSwitchyard(t.redis, { config: { blockTimeoutSec: 30 } });
    try {
      await c.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }], minIdle: durationFromMs(60_000) });
      await c.client.enqueue(Q, ["e0", "e1", "e2"]);
      const one = c.client.lease(Q, 3, { group: "g" });
      const got = await one.take(3);
      one.setCredit(0);
      one.release([got[1].leaseToken, got[2].leaseToken]);
      // Opened at once: its first lease races the release's undo, finds nothing, and the pump goes to wait.
      const two = c.client.lease(Q, 2, { group: "g" });
      const seen: [string, number][] = [];
      void (async () => {
        for await (const d of two) seen.push([text(d), d.deliveryCount]);
      })();
      await expect.poll(() => seen, { timeout: 5000 }).toEqual([["e1", 1], ["e2", 1]]);
      one.ack(got[0].leaseToken);
      await Promise.all([one.close(), two.close()]);
    } finally {
      await c.stop();
    }
  });
});

describe("what held", () => {
  it("a lost stream: its waiting deliveries never start, the new stream's credit leaves room for the running one, no more than `concurrency` run", async () => {
    const Q = "{pr-cut}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3", "j4"]);
    const proxy = await startProxy(t.sy.address);
    const client = new SwitchyardClient(proxy.address);
    let now = 0, most = 0;
    const h = held();
    const errors: unknown[] = [];
    const worker = runWorker({
      client, queue: Q, concurrency: 2, prefetch: 1, prefetchMs: Infinity, onError: (e) => errors.push(e),
      handler: (d, ctx) => {
        now++; most = Math.max(most, now);
        return h.handler(d).finally(() => now--);
      },
    });
    try {
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(3n);
      expect(h.started.map(text)).toEqual(["j0", "j1"]);
      expect(proxy.cut()).toBeGreaterThan(0);
      // The server returned j0..j2 (counted); the new stream has room for 2 - 2 running = 0: it waits.
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).ready).toBe(5n);
      h.finish[0]();
      // One slot: credit 1 + prefetch 1.
      await expect.poll(() => credits(t.sy, Q), { timeout: 10_000 }).toEqual([2]);
      await expect.poll(() => h.started.length).toBe(3);
      expect(text(h.started[2])).toBe("j0");
      expect(h.started[2].deliveryCount).toBe(2);
      // j2 waited on the lost stream and never started there; now it is the second waiting.
      h.finish[1]();
      await expect.poll(() => credits(t.sy, Q)).toEqual([3]);
      await expect.poll(() => h.started.length).toBe(4);
      for (let i = 2; i < 20; i++) h.finish[i]?.();
      await expect.poll(async () => {
        for (const f of h.finish) f();
        return (await t.sy.client.getQueueStats(Q)).completedTotal;
      }).toBe(5n);
      expect(most).toBeLessThanOrEqual(2);
      expect(h.started.map(text).filter((t) => t === "j2")).toHaveLength(1);
    } finally {
      for (const f of h.finish) f();
      await worker.stop();
      client.close();
      await proxy.close();
    }
  });

  it("a STREAM queue's entries that waited go back on a drain, uncounted, and another instance's worker reads them", async () => {
    const Q = "pr-stream-drain";
    const c = await startSwitchyard(t.redis, { config: { shutdownGraceMs: 60_000 } });
    const h = held();
    try {
      await c.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }], minIdle: durationFromMs(60_000) });
      await c.client.enqueue(Q, ["e0", "e1", "e2", "e3"]);
      const worker = runWorker({ client: c.client, queue: Q, group: "g", concurrency: 1, prefetch: 2, prefetchMs: Infinity, handler: h.handler, onError: () => undefined });
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).groups[0]?.pending).toBe(3n);
      const draining = c.app.queues.drain(60_000);
      await expect.poll(async () => (await t.redis.plain.xpending(Q, "g", "-", "+", 10) as unknown[][]).filter((p) => p[1] === "switchyard.parked").length).toBe(2);
      // The other instance's pump reclaims them on its next pass (XREAD BLOCK waits SWITCHYARD_BLOCK_TIMEOUT, 1 s):
      // not "at once" across instances, and after the new entry e3.
      const other = t.sy.client.lease(Q, 3, { group: "g" });
      const got = await other.take(3);
      expect(got.map((d) => [text(d), d.deliveryCount]).sort()).toEqual([["e1", 1], ["e2", 1], ["e3", 1]]);
      h.finish[0]();
      await draining;
      await worker.stop();
      for (const d of got) other.ack(d.leaseToken);
      await other.close();
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).groups[0]?.pending).toBe(0n);
      expect(h.started.map(text)).toEqual(["e0"]);
    } finally {
      for (const f of h.finish) f();
      await c.stop();
    }
  });

  it("stop() during a reconnect resolves, and nothing is lost", async () => {
    const Q = "{pr-stop-reconnect}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2"]);
    const proxy = await startProxy(t.sy.address);
    const client = new SwitchyardClient(proxy.address);
    const h = held();
    const worker = runWorker({ client, queue: Q, concurrency: 1, prefetch: 1, prefetchMs: Infinity, stopGraceMs: 0, handler: h.handler, onError: () => undefined });
    try {
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(2n);
      proxy.down();
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(0n);
      const unfinished = await worker.stop();
      expect(unfinished.map(text)).toEqual(["j0"]);
      expect(await next(t.sy, Q, 3)).toEqual([["j0", 2], ["j1", 2], ["j2", 1]]);
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("stop() at varied moments after start: what never ran keeps its delivery count", async () => {
    const wrong: string[] = [];
    for (let k = 0; k < 24; k++) {
      const Q = `{pr-vary-${k}}`;
      await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
      await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3"]);
      const started: string[] = [];
      const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 1, prefetch: 2, prefetchMs: Infinity, stopGraceMs: 0, handler: (d) => (started.push(text(d)), new Promise<void>(() => undefined)) });
      for (let i = 0; i < k; i++) await new Promise((r) => (k % 2 ? setImmediate(r) : setTimeout(r, 1)));
      await worker.stop();
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(0n);
      for (const [p, n] of await next(t.sy, Q, 4)) if (n !== (started.includes(p) ? 2 : 1)) wrong.push(`${k}: ${p} count ${n}`);
    }
    expect(wrong).toEqual([]);
  });

  it("stop() twice: both resolve; what waited goes back once, uncounted", async () => {
    const Q = "{pr-stop-twice}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["j0", "j1", "j2", "j3"]);
    const h = held();
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 1, prefetch: 2, prefetchMs: Infinity, stopGraceMs: 10_000, clock: t.sy.clock, handler: h.handler });
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(3n);
    const [s1, s2] = [worker.stop(), worker.stop()];
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(1n);
    h.finish[0]();
    expect(await Promise.all([s1, s2])).toEqual([[], []]);
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).completedTotal).toBe(1n);
    expect(await next(t.sy, Q, 3)).toEqual([["j1", 1], ["j2", 1], ["j3", 1]]);
  });

  it("sync, async and throwing handlers mixed: never more than `concurrency` at once, each item completed, nothing left", async () => {
    const Q = "{pr-mixed}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const N = 200;
    await t.sy.client.enqueue(Q, Array.from({ length: N }, (_, i) => `m${i}`));
    let now = 0, most = 0;
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: 3, prefetch: 4, prefetchMs: Infinity, onError: () => undefined,
      handler: (d) => {
        const i = Number(text(d).slice(1));
        if (d.deliveryCount === 1 && i % 7 === 0) throw new Error("sync throw");
        if (i % 3 === 0) return;
        now++;
        most = Math.max(most, now);
        return new Promise<void>((ok, fail) => setTimeout(() => {
          now--;
          if (d.deliveryCount === 1 && i % 11 === 0) fail(new Error("async throw"));
          else ok();
        }, i % 4));
      },
    });
    await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).completedTotal, { timeout: 10_000 }).toBe(BigInt(N));
    await worker.stop();
    expect(most).toBeLessThanOrEqual(3);
    const stats = await t.sy.client.getQueueStats(Q);
    expect([stats.ready, stats.processing, stats.deadLetter]).toEqual([0n, 0n, 0n]);
  });

  it("release before open ends the call INVALID_ARGUMENT", async () => {
    const raw = rawLease(t.sy.address, { read: true });
    raw.send({ case: "release", value: { leaseTokens: ["x"] } });
    await expect.poll(() => raw.status()).toBe("3");
    raw.close();
  });

  it("release of another queue's token, a huge token and a duplicate: each answered, nothing else moves", async () => {
    const [Q, O] = ["{pr-hostile}", "{pr-hostile-other}"];
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.createQueue({ name: O, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, ["q0", "q1"]);
    await t.sy.client.enqueue(O, ["o0"]);
    const one = t.sy.client.lease(Q, 2);
    const other = t.sy.client.lease(O, 1);
    const results: SettleResult[] = [];
    one.onSettleResult((r) => results.push(r));
    try {
      const [q0, q1] = await one.take(2);
      const [o0] = await other.take(1);
      one.setCredit(0);
      const huge = "r." + "9".repeat(100_000);
      one.release([q1.leaseToken, q1.leaseToken, o0.leaseToken, huge]);
      await expect.poll(() => results.length).toBe(2);
      expect(results.map(result)).toEqual([
        { token: o0.leaseToken, code: 9, reason: "LEASE_NOT_HELD" },
        { token: huge, code: 3, reason: "LEASE_TOKEN_INVALID" },
      ]);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).ready).toBe(1n);
      expect((await t.sy.client.getQueueStats(Q)).processing).toBe(1n);
      expect((await t.sy.client.getQueueStats(O)).processing).toBe(1n);
      one.ack(q0.leaseToken);
      other.ack(o0.leaseToken);
    } finally {
      await Promise.all([one.close(), other.close()]);
    }
    expect(await next(t.sy, Q, 1)).toEqual([["q1", 1]]);
  });

  it("SWITCHYARD_MAX_CREDIT below concurrency + prefetch: the credit is clamped, a larger release ends the stream INVALID_ARGUMENT", async () => {
    const Q = "{pr-max-credit}";
    const c = await startSwitchyard(t.redis, { config: { maxCredit: 3 } });
    const h = held();
    try {
      await c.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
      await c.client.enqueue(Q, ["j0", "j1", "j2", "j3", "j4"]);
      const errors: unknown[] = [];
      const worker = runWorker({ client: c.client, queue: Q, concurrency: 2, prefetch: 5, prefetchMs: Infinity, handler: h.handler, onError: (e) => errors.push(e) });
      await expect.poll(() => credits(c, Q)).toEqual([3]);
      await expect.poll(async () => (await c.client.getQueueStats(Q)).processing).toBe(3n);
      expect(h.started.map(text)).toEqual(["j0", "j1"]);
      const raw = c.client.lease(Q, 1);
      await raw.opened;
      raw.release(["a", "b", "c", "d"]);
      expect((await raw.ended)?.code).toBe(3);
      for (const f of h.finish) f();
      await expect.poll(() => h.started.length).toBe(4);
      for (const f of h.finish) f();
      await worker.stop();
      expect(errors).toEqual([]);
    } finally {
      for (const f of h.finish) f();
      await c.stop();
    }
  });

  it("STREAM: a settle of a released entry is refused LEASE_SUPERSEDED; the group reads it again with count 1", async () => {
    const Q = "pr-stream-release";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }], minIdle: durationFromMs(60_000) });
    await t.sy.client.enqueue(Q, ["e0", "e1", "e2"]);
    const one = t.sy.client.lease(Q, 3, { group: "g" });
    const results: SettleResult[] = [];
    one.onSettleResult((r) => results.push(r));
    try {
      const got = await one.take(3);
      one.setCredit(0);
      one.release([got[2].leaseToken, got[1].leaseToken]);
      expect(await next(t.sy, Q, 2, "g")).toEqual([["e1", 1], ["e2", 1]]);
      one.ack(got[1].leaseToken);
      await expect.poll(() => results.length).toBe(1);
      expect(results.map(result)).toEqual([{ token: got[1].leaseToken, code: 9, reason: "LEASE_SUPERSEDED" }]);
      one.ack(got[0].leaseToken);
    } finally {
      await one.close();
    }
  });
});
