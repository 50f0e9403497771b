/**
 * Review of runWorker's prefetch and LeaseRequest.release (docs/worker-protocol.md
 * "Prefetch and release"), against real Redis and gRPC: the defects found (each
 * named for what it checks) and what held.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery, type SettleResult } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import { SwitchyardClient } from "../../src/client/client.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startProxy } from "../helpers/proxy.js";
import { rawLease } from "../helpers/raw-lease.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let a: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  a = await startSwitchyard(redis);
});
afterAll(async () => {
  await a.stop();
  await redis.stop();
});

const text = (d: Delivery) => Buffer.from(d.payload).toString();
/** The credit of the open streams of `queue` on instance `on`. */
const credits = (on: TestSwitchyard, queue: string) =>
  [...(on.app.queues["streams"] as Set<LeaseStream>)].filter((s) => s.queue === queue && !s.closed).map((s) => s.credit);
const result = (r: SettleResult) => ({ token: r.leaseToken, code: r.code, reason: r.reason });

/** A handler that holds every delivery until the test lets it go. */
function held() {
  const started: Delivery[] = [];
  const finish: (() => void)[] = [];
  return { started, finish, handler: (d: Delivery) => (started.push(d), new Promise<void>((ok) => finish.push(ok))) };
}

/** The next `n` deliveries of `queue` as [payload, delivery count], through a fresh stream. */
async function next(on: TestSwitchyard, queue: string, n: number, group = ""): Promise<[string, number][]> {
  const lease = on.client.lease(queue, n, { group });
  const got = await lease.take(n);
  await lease.close();
  return got.map((d) => [text(d), d.deliveryCount]);
}

describe("defects", () => {
  it("stop() while deliveries are on their way gives them back uncounted (the stream's close returned them counted)", async () => {
    const Q = "{pr-inflight}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const proxy = await startProxy(a.address);
    const client = new SwitchyardClient(proxy.address);
    const started: string[] = [];
    const worker = runWorker({ client, queue: Q, concurrency: 1, prefetch: 2, stopGraceMs: 0, handler: (d) => void started.push(text(d)) });
    try {
      await expect.poll(() => credits(a, Q)).toEqual([3]);
      // The server leases three for the idle worker; they stay in the proxy while the worker stops.
      proxy.holdReplies();
      await a.client.enqueue(Q, ["j0", "j1", "j2", "j3"]);
      await expect.poll(async () => (await a.client.getQueueStats(Q)).processing).toBe(3n);
      const stopping = worker.stop();
      // The server took the worker's credit 0 (before the fix, the stream may have ended already).
      await expect.poll(() => credits(a, Q).join()).toMatch(/^0?$/);
      proxy.restore();
      expect(await stopping).toEqual([]);
      expect(started).toEqual([]);
      await expect.poll(async () => (await a.client.getQueueStats(Q)).processing).toBe(0n);
      // No handler saw them: their next delivery is still their first.
      expect(await next(a, Q, 4)).toEqual([["j0", 1], ["j1", 1], ["j2", 1], ["j3", 1]]);
    } finally {
      client.close();
      await proxy.close();
    }
  });

  it("release answers a malformed token INVALID_ARGUMENT LEASE_TOKEN_INVALID, as ack_batch does (it said LEASE_NOT_HELD)", async () => {
    const Q = "{pr-malformed}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await a.client.enqueue(Q, ["j0"]);
    const lease = a.client.lease(Q, 1);
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
      const stats = await a.client.getQueueStats(Q);
      expect([stats.ready, stats.processing]).toEqual([0n, 1n]);
    } finally {
      await lease.close();
    }
  });

  it("release of a delivery whose ack went just before comes back LEASE_NOT_HELD (it was silently taken as released)", async () => {
    const Q = "{pr-ack-release}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(60_000), recoverySet: "{pr-ack-release}.claims" });
    await a.client.enqueue(Q, ["j0", "j1"]);
    const lease = a.client.lease(Q, 2);
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
      await expect.poll(async () => (await a.client.getQueueStats(Q)).ready).toBe(1n);
      const stats = await a.client.getQueueStats(Q);
      expect([stats.processing, stats.completedTotal]).toEqual([0n, 1n]);
      expect(await redis.plain.zcard("{pr-ack-release}.claims")).toBe(0);
    } finally {
      await lease.close();
    }
    expect(await next(a, Q, 1)).toEqual([["j1", 1]]);
  });
});
