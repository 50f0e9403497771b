/**
 * Settings that change on a declared queue (issue 14): UpdateQueue with a
 * field mask changes only the named settings, on every instance, and refuses
 * what cannot change while items are in flight; a queue's standing publish
 * ttl and reply route apply to every push; idempotency keys hold across
 * instances, a restart, and for delayed items.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { errorReason } from "../../src/client/errors.js";
import { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const clock = new ManualClock();
let redis: TestRedis;
let a: TestSwitchyard;
let b: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  [a, b] = await Promise.all([startSwitchyard(redis, { clock }), startSwitchyard(redis, { clock })]);
});
afterAll(async () => {
  await Promise.all([a.stop(), b.stop()]);
  await redis.stop();
});

const refusal = (p: Promise<unknown>) => p.then(() => undefined, (e: grpc.ServiceError) => ({ code: e.code, reason: errorReason(e), details: e.details }));

describe("UpdateQueue", () => {
  it("changes only the masked settings, and another instance applies them", async () => {
    const Q = "{tuned}";
    await a.client.createQueue({
      name: Q, mode: QueueMode.RELIABLE, maxDeliveries: 5,
      retryPolicy: { initialBackoff: durationFromMs(0), multiplier: 3, maxBackoff: durationFromMs(90_000) },
    });
    const updated = await a.client.updateQueue({ name: Q, maxDeliveries: 2, mode: QueueMode.SIMPLE, retryPolicy: { multiplier: 7 } }, ["max_deliveries"]);
    // The unmasked fields of the request (mode, the policy) changed nothing.
    expect([updated.maxDeliveries, updated.mode, updated.retryPolicy?.multiplier]).toEqual([2, QueueMode.RELIABLE, 3]);
    const policy = await a.client.updateQueue({ name: Q, retryPolicy: { maxBackoff: durationFromMs(30_000) } }, ["retry_policy.max_backoff"]);
    expect([policy.retryPolicy?.multiplier, durationMs(policy.retryPolicy!.maxBackoff!)]).toEqual([3, 30_000]);

    // Instance b heard of it: its stream's item dead-letters at the second delivery.
    await expect.poll(() => b.app.queues.registry.cached(Q)?.maxDeliveries).toBe(2);
    const [id] = await a.client.enqueue(Q, ["fails"]);
    const lease = b.client.lease(Q, 1);
    const [first] = await lease.take(1);
    expect((await b.client.retry(first.leaseToken, { reason: "one" })).deadLettered).toBe(false);
    const [second] = await lease.take(1);
    expect([second.id, second.deliveryCount]).toEqual([id, 2]);
    expect((await b.client.retry(second.leaseToken, { reason: "two" })).deadLettered).toBe(true);
    await lease.close();
    expect((await a.client.peekQueue(Q, QueueList.DEAD_LETTER)).items.map((i) => [i.id, i.lastError])).toEqual([[id, "two"]]);
  });

  it("sets jitter 0 when the mask names retry_policy.jitter (proto3 cannot tell 0 from unset elsewhere: there it is the default 0.2)", async () => {
    const Q = "{steady}";
    const created = await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, retryPolicy: { initialBackoff: durationFromMs(1000), jitter: 0 } });
    expect(created.retryPolicy?.jitter).toBe(0.2);
    const steady = await a.client.updateQueue({ name: Q, retryPolicy: { jitter: 0 } }, ["retry_policy.jitter"]);
    expect([steady.retryPolicy?.jitter, durationMs(steady.retryPolicy!.initialBackoff!)]).toEqual([0, 1000]);
    // Without jitter every retry waits the policy's full wait: 1 s, then 2 s.
    const [id] = await a.client.enqueue(Q, ["waits"]);
    const lease = a.client.lease(Q, 1);
    const waits: number[] = [];
    for (let attempt = 1; attempt <= 2; attempt++) {
      const [d] = await lease.take(1);
      expect(d.id).toBe(id);
      const r = await a.client.retry(d.leaseToken, { reason: `failed ${attempt}` });
      const wait = Number(r.notBefore!.seconds) * 1000 + Math.floor(r.notBefore!.nanos / 1e6) - clock.now();
      waits.push(wait);
      await clock.advance(wait);
    }
    await lease.close();
    expect(waits).toEqual([1000, 2000]);
    // A later update of another policy field keeps it.
    const kept = await a.client.updateQueue({ name: Q, retryPolicy: { multiplier: 3 } }, ["retry_policy.multiplier"]);
    expect(kept.retryPolicy?.jitter).toBe(0);
  });

  it("refuses an empty mask, an unknown path, a bad value and a key or mode change, changing nothing", async () => {
    const Q = "{fixed}";
    const before = await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, maxDeliveries: 4 });
    expect(await refusal(a.client.updateQueue({ name: Q, maxDeliveries: 9 }, []))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("update_mask is required"),
    });
    expect(await refusal(a.client.updateQueue({ name: Q }, ["colour"]))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining(`update_mask path "colour"`),
    });
    expect(await refusal(a.client.updateQueue({ name: Q, retryPolicy: { jitter: 2 } }, ["retry_policy.jitter"]))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("jitter must be between 0 and 1"),
    });
    // NaN is no number to wait by: refused, not taken as unset (the default) nor as 0.
    for (const [path, policy] of [["retry_policy.jitter", { jitter: NaN }], ["retry_policy.multiplier", { multiplier: NaN }]] as const) {
      const wanted = path === "retry_policy.jitter" ? "jitter must be between 0 and 1" : "multiplier must be between 1 and 100";
      expect(await refusal(a.client.updateQueue({ name: Q, retryPolicy: policy }, [path]))).toMatchObject({
        code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining(wanted),
      });
      expect(await refusal(a.client.createQueue({ name: "{nan}", mode: QueueMode.RELIABLE, retryPolicy: policy }))).toMatchObject({
        code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining(wanted),
      });
    }
    expect(await refusal(a.client.getQueue("{nan}"))).toMatchObject({ code: grpc.status.NOT_FOUND });
    for (const path of ["mode", "processing_list", "dead_letter_list", "recovery_set"]) {
      expect(await refusal(a.client.updateQueue({ name: Q, mode: QueueMode.SIMPLE, processingList: "{fixed}.p2", deadLetterList: "{fixed}.d2", recoverySet: "{fixed}.c2" }, [path]))).toMatchObject({
        code: grpc.status.FAILED_PRECONDITION, reason: "IMMUTABLE_FIELD", details: expect.stringContaining(`${path} cannot change while the queue is declared`),
      });
    }
    // Not key names: the refusal says where they do change, not to declare the queue again.
    expect(await refusal(a.client.updateQueue({ name: Q, paused: true }, ["paused"]))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("PauseQueue and ResumeQueue"),
    });
    expect(await refusal(a.client.updateQueue({ name: Q }, ["create_time"]))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("set by the server"),
    });
    expect(await a.client.getQueue(Q)).toEqual(before);
  });
});

describe("a queue's standing publish ttl and reply route", () => {
  it("every push refreshes the expiry unless it gives its own; replies go to the reply route", async () => {
    await a.client.createQueue({ name: "{jobs-in}", mode: QueueMode.RELIABLE, replyQueue: "{jobs-out}" });
    await a.client.createQueue({ name: "{jobs-out}", mode: QueueMode.SIMPLE, publishTtl: durationFromMs(600_000) });
    await a.client.enqueue("{jobs-out}", ["first"]);
    const ttl = await redis.plain.pttl("{jobs-out}");
    expect(ttl).toBeGreaterThan(590_000);
    expect(ttl).toBeLessThanOrEqual(600_000);
    await a.client.enqueue("{jobs-out}", ["own ttl"], { ttlMs: 5000 });
    expect(await redis.plain.pttl("{jobs-out}")).toBeLessThanOrEqual(5000);

    // An ack whose replies name no queue: they go to {jobs-in}'s reply_queue, with {jobs-out}'s ttl.
    await a.client.enqueue("{jobs-in}", ["render"]);
    const lease = a.client.lease("{jobs-in}", 1);
    const [d] = await lease.take(1);
    const { replyIds } = await a.client.ack(d.leaseToken, { queue: "", items: ["rendered"] });
    await lease.close();
    expect(replyIds).toHaveLength(1);
    expect(await redis.plain.pttl("{jobs-out}")).toBeGreaterThan(590_000);
    const out = (await a.client.peekQueue("{jobs-out}", QueueList.READY, 10)).items.map((i) => Buffer.from(i.payload).toString());
    // Next to leave first: the reply is behind the two items pushed before it.
    expect(out).toEqual(["first", "own ttl", "rendered"]);
    expect((await a.client.peekQueue("{jobs-out}", QueueList.READY, 10)).items[2].id).toBe(replyIds[0]);

    // Without a route anywhere, replies are refused with what to fix.
    await a.client.enqueue("{jobs-out}", ["x"]);
    const plain = b.client.lease("{jobs-out}", 1);
    const [p] = await plain.take(1);
    expect(await refusal(a.client.ack(p.leaseToken, { queue: "", items: ["nowhere"] }))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining("reply_queue is required with replies"),
    });
    await plain.close();
  });
});

describe("idempotency keys", () => {
  it("hold across instances, a restart, and for delayed items", async () => {
    const Q = "{once-everywhere}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const [first] = await a.client.enqueue(Q, [{ payload: "invoice 7", idempotencyKey: "invoice-7" }]);
    expect(await b.client.enqueue(Q, [{ payload: "invoice 7 again", idempotencyKey: "invoice-7" }])).toEqual([first]);
    const [later] = await b.client.enqueue(Q, [{ payload: "reminder 7", idempotencyKey: "reminder-7", delayMs: 60_000 }]);
    expect(await a.client.enqueue(Q, [{ payload: "reminder 7 again", idempotencyKey: "reminder-7", delayMs: 60_000 }])).toEqual([later]);

    const c = await startSwitchyard(redis, { clock }); // a new instance, as after a restart
    try {
      expect(await c.client.enqueue(Q, [{ payload: "again", idempotencyKey: "invoice-7" }, { payload: "again", idempotencyKey: "reminder-7" }])).toEqual([first, later]);
    } finally {
      await c.stop();
    }
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 1n, delayed: 1n });
  });
});
