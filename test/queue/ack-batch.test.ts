/** Batched acks on a Lease stream (LeaseRequest.ack_batch), and the single acks older clients send. */
import { describe, expect, it } from "vitest";
import type * as grpc from "@grpc/grpc-js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  type LeaseRequest,
  LeaseRequestSchema,
  type LeaseResponse,
  QueueMode,
  type QueueSchema,
  type SettleResult,
} from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import type { SwitchyardClient } from "../../src/client/client.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const MIN_IDLE_MS = 60_000;
const t = useSwitchyard();

/** A Lease stream driven message by message, as a client of any version would. */
function rawLease(client: SwitchyardClient) {
  const call = (client.grpc as unknown as { lease(): grpc.ClientDuplexStream<LeaseRequest, LeaseResponse> }).lease();
  const received: LeaseResponse[] = [];
  let failure: grpc.ServiceError | undefined;
  call.on("data", (m: LeaseResponse) => received.push(m));
  call.on("error", (err: grpc.ServiceError) => (failure = err));
  const of = <K extends LeaseResponse["kind"]["case"]>(k: K) =>
    received.filter((m) => m.kind.case === k).map((m) => m.kind.value as Extract<LeaseResponse["kind"], { case: K }>["value"]);
  return {
    send: (kind: MessageInitShape<typeof LeaseRequestSchema>["kind"]) => call.write(create(LeaseRequestSchema, { kind })),
    of,
    deliveries: () => of("deliveries").flatMap((b) => b!.deliveries),
    /** The status the stream failed with, once it has. */
    failure: () => failure,
    close: () => call.end(),
  };
}

/** Declares `queue`, enqueues `items` and opens a raw Lease stream on it with credit for them all; resolves once it holds them. */
async function holding(queue: MessageInitShape<typeof QueueSchema>, items: string[]) {
  await t.sy.client.createQueue(queue);
  await t.sy.client.enqueue(queue.name!, items);
  const lease = rawLease(t.sy.client);
  lease.send({ case: "open", value: { queue: queue.name, credit: items.length } });
  await expect.poll(() => lease.deliveries().length).toBe(items.length);
  return lease;
}

describe("ack_batch", () => {
  it("is advertised on open, acks every good token, and reports each bad one on its own", async () => {
    const { sy, redis } = t;
    const Q = "{batch}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: durationFromMs(MIN_IDLE_MS) });
    await sy.client.enqueue(Q, ["recovered"]);
    const stalled = sy.client.lease(Q, 1);
    expect((await stalled.opened).ackBatches).toBe(true);
    const [old] = await stalled.take(1);
    stalled.setCredit(0);
    await (sy.clock as ManualClock).advance(MIN_IDLE_MS + 1000); // the watchdog recovers it
    const fresh = sy.client.lease(Q, 1);
    const [current] = await fresh.take(1);
    expect(current.fence).toBeGreaterThan(old.fence);

    await sy.client.enqueue(Q, ["a", "b", "c"]);
    stalled.setCredit(4);
    const good = (await stalled.take(3)).map((d) => d.leaseToken);
    const results: SettleResult[] = [];
    stalled.onSettleResult((r) => results.push(r));
    // Made in one turn, these go out as one ack_batch.
    const unknown = good[0].replace(/^r\.\d+\./, "r.999.");
    for (const token of [good[0], old.leaseToken, good[1], "not-a-token", good[2], unknown]) stalled.ack(token);

    await expect.poll(() => results.length).toBe(3);
    const byToken = new Map(results.map((r) => [r.leaseToken, r]));
    expect(byToken.get(old.leaseToken)).toMatchObject({ code: 9, message: expect.stringContaining("superseded") }); // FAILED_PRECONDITION
    expect(byToken.get("not-a-token")).toMatchObject({ code: 3 }); // INVALID_ARGUMENT
    expect(byToken.get(unknown)).toMatchObject({ code: 5 }); // NOT_FOUND
    // The good ones are gone; the item leased again is still held by its new holder.
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(1);
    expect(await redis.plain.llen(Q)).toBe(0);

    // Their credit came back: the stream takes 4 more.
    await sy.client.enqueue(Q, ["d", "e", "f", "g"]);
    expect(await stalled.take(4)).toHaveLength(4);
    await Promise.all([stalled.close(), fresh.close()]);
  });

  it("frees credit for a simple queue's tokens", async () => {
    const { sy } = t;
    const Q = "{batch-simple}";
    const lease = await holding({ name: Q, mode: QueueMode.SIMPLE }, ["a", "b"]);
    lease.send({ case: "ackBatch", value: { leaseTokens: lease.deliveries().map((d) => d.leaseToken) } });
    await sy.client.enqueue(Q, ["c", "d"]);
    await expect.poll(() => lease.deliveries().length).toBe(4);
    expect(lease.of("settleResult")).toEqual([]);
    lease.close();
  });
});

describe("ack_batch naming a token more than once", () => {
  // Issue 12: a batch naming an acked token twice must not report a failure for it.
  it("counts it once: each token acked once with one unit of credit back, a malformed one refused once", async () => {
    const { sy, redis } = t;
    const Q = "{batch-repeat}";
    const lease = await holding({ name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: durationFromMs(MIN_IDLE_MS) }, ["a", "b"]);
    const [a, b] = lease.deliveries().map((d) => d.leaseToken);
    lease.send({ case: "ackBatch", value: { leaseTokens: [a, b, a, "not-a-token", a, "not-a-token"] } });
    await expect.poll(() => lease.of("settleResult").length).toBe(1);
    expect(lease.of("settleResult")[0]).toMatchObject({ leaseToken: "not-a-token", code: 3, reason: "LEASE_TOKEN_INVALID" });
    await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    expect(await redis.plain.zcard(`${Q}.claims`)).toBe(0);
    // Two tokens, two units of credit: of three items, one still waits once two came.
    await sy.client.enqueue(Q, ["c", "d", "e"]);
    await expect.poll(() => lease.deliveries().length).toBe(4);
    await expect.poll(() => redis.plain.llen(Q)).toBe(1);
    expect(lease.of("settleResult")).toHaveLength(1);
    lease.close();
  });

  it("counts a simple queue's token once too", async () => {
    const { sy, redis } = t;
    const Q = "{batch-repeat-simple}";
    const lease = await holding({ name: Q, mode: QueueMode.SIMPLE }, ["a", "b"]);
    const [a] = lease.deliveries().map((d) => d.leaseToken);
    lease.send({ case: "ackBatch", value: { leaseTokens: [a, a] } });
    await sy.client.enqueue(Q, ["c", "d"]);
    await expect.poll(() => lease.deliveries().length).toBe(3);
    // A malformed token behind it: its refusal comes after anything the repeat would have answered.
    lease.send({ case: "ackBatch", value: { leaseTokens: ["not-a-token"] } });
    await expect.poll(() => lease.of("settleResult").length).toBe(1);
    expect(lease.of("settleResult")[0]).toMatchObject({ leaseToken: "not-a-token", code: 3 });
    // One unit of credit came back for the two: "d" still waits.
    expect(lease.deliveries()).toHaveLength(3);
    expect(await redis.plain.llen(Q)).toBe(1);
    lease.close();
  });
});

describe("ack_batch size", () => {
  it("ends the stream with INVALID_ARGUMENT when one batch carries more tokens than any stream may hold (SWITCHYARD_MAX_CREDIT)", async () => {
    const { redis } = t;
    const Q = "{batch-huge}";
    const lease = await holding({ name: Q, mode: QueueMode.RELIABLE }, ["held"]);
    // 10,001 tokens: the real one and 10,000 made up, more than the highest credit (10,000) lets a stream hold.
    const leaseTokens = [lease.deliveries()[0].leaseToken, ...Array.from({ length: 10_000 }, (_, i) => `r.${i}.0000000000000000000000000000000000000000`)];
    lease.send({ case: "ackBatch", value: { leaseTokens } });
    await expect.poll(() => lease.failure()?.code).toBe(3); // INVALID_ARGUMENT
    expect(lease.failure()!.details).toMatch(/ack_batch of 10001 tokens; send at most 10000 per message/);
    expect(lease.of("settleResult")).toEqual([]); // not one reply per token
    // Nothing of the batch applied: the stream's item went back to its queue when the stream ended.
    await expect.poll(() => redis.plain.llen(Q)).toBe(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });
});

describe("single acks (clients that do not batch)", () => {
  it("still settle one by one, with failures reported", async () => {
    const { redis } = t;
    const Q = "{single}";
    const lease = await holding({ name: Q, mode: QueueMode.RELIABLE }, ["a", "b", "c"]);
    const [a, b, c] = lease.deliveries();
    for (const d of [a, b, c, a]) lease.send({ case: "ack", value: { leaseToken: d.leaseToken } });
    await expect.poll(() => lease.of("settleResult").length).toBe(1);
    expect(lease.of("settleResult")[0]).toMatchObject({ leaseToken: a.leaseToken, code: 9 });
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    lease.close();
  });
});
