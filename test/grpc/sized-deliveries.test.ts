/**
 * Sized deliveries (issue 17, broken item 1): the server keeps each delivery
 * message within what the worker receives (LeaseOpen.max_message_bytes, gRPC's
 * 4 MiB by default) and what it sends itself (SWITCHYARD_MAX_MESSAGE_BYTES), and
 * an item that fits no message is dead-lettered alone, with the reason. Real
 * gRPC with stock grpc-js receive limits; on eafbcbb each of these failed: the
 * stream ended with RESOURCE_EXHAUSTED and the items it held went with it.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueList, QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient, type LeaseSession } from "../../src/client/client.js";
import { useSwitchyard } from "../helpers/switchyard.js";
import { createLogger } from "../../src/log.js";

const MiB = 1024 * 1024;

// Stored items may be up to 8 MiB here (headers count), so an item larger than a stock client's 4 MiB gets in.
const lines: string[] = [];
const t = useSwitchyard({ config: { maxItemBytes: 8 * MiB }, log: createLogger("warn", (line) => void lines.push(line)) });

/** Takes `n` deliveries from the session, acking each; fails if the stream ends first. */
async function takeAndAck(session: LeaseSession, n: number): Promise<Delivery[]> {
  const out: Delivery[] = [];
  while (out.length < n) {
    const d = await session.next();
    if (!d) throw new Error(`the lease stream ended after ${out.length} of ${n} deliveries: ${(await session.ended)?.message ?? "cleanly"}`);
    session.ack(d.leaseToken);
    out.push(d);
  }
  return out;
}

/** True while the session's stream is still open. */
async function stillOpen(session: LeaseSession): Promise<boolean> {
  return (await Promise.race([session.ended.then(() => "ended"), new Promise((ok) => setImmediate(ok, "open"))])) === "open";
}

/** Enqueues `count` items of exactly 1 MiB (the payload limit), ten per call; item i is filled with byte i. */
async function enqueueMiB(queue: string, count: number): Promise<void> {
  for (let from = 0; from < count; from += 10) {
    const n = Math.min(10, count - from);
    await t.sy.client.enqueue(queue, Array.from({ length: n }, (_, j) => Buffer.alloc(MiB, (from + j) % 256)));
  }
}

/** Runs `fn` with a client whose channel receives up to `bytes` (which its Lease streams announce), and closes it. */
async function withReceiveLimit<T>(bytes: number, fn: (client: SwitchyardClient) => Promise<T>): Promise<T> {
  const client = new SwitchyardClient(t.sy.address, { channelOptions: { "grpc.max_receive_message_length": bytes } });
  try {
    return await fn(client);
  } finally {
    client.close();
  }
}

/** Ready, processing and dead-letter counts of a queue. */
async function counts(queue: string) {
  const s = await t.sy.client.getQueueStats(queue);
  return { ready: Number(s.ready), processing: Number(s.processing), deadLetter: Number(s.deadLetter) };
}

describe("delivery messages sized for the worker", () => {
  it("10 items of 1 MiB at credit 10 all reach a stock grpc-js client (4 MiB receive limit)", async () => {
    const Q = "{sized-10}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await enqueueMiB(Q, 10);
    const session = t.sy.client.lease(Q, 10);
    const got = await takeAndAck(session, 10);
    expect(got.map((d) => d.payload.length)).toEqual(Array(10).fill(MiB));
    expect(got.map((d) => d.payload[0]).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(await stillOpen(session)).toBe(true);
    await session.close();
    await expect.poll(() => counts(Q)).toEqual({ ready: 0, processing: 0, deadLetter: 0 });
  });

  it("an item with a 5 MB header is dead-lettered alone, with its reason; the 50 small ones beside it are delivered", async () => {
    const Q = "{sized-big-header}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const small = (i: number) => ({ payload: `small-${i}` });
    await t.sy.client.enqueue(Q, Array.from({ length: 25 }, (_, i) => small(i)));
    await t.sy.client.enqueue(Q, [{ payload: "big", headers: { big: "x".repeat(5_000_000) } }]);
    await t.sy.client.enqueue(Q, Array.from({ length: 25 }, (_, i) => small(25 + i)));
    const session = t.sy.client.lease(Q, 60);
    const got = await takeAndAck(session, 50);
    expect(new Set(got.map((d) => Buffer.from(d.payload).toString()))).toEqual(new Set(Array.from({ length: 50 }, (_, i) => `small-${i}`)));
    expect(await stillOpen(session)).toBe(true);
    await session.close();
    await expect.poll(() => counts(Q)).toEqual({ ready: 0, processing: 0, deadLetter: 1 });
    // Peeking it needs a client that receives more than 4 MiB too.
    const dead = await withReceiveLimit(16 * MiB, (wide) => wide.peekQueue(Q, QueueList.DEAD_LETTER, 10));
    expect(dead.items).toHaveLength(1);
    expect(Buffer.from(dead.items[0].payload).toString()).toBe("big");
    expect(dead.items[0].headers.big).toHaveLength(5_000_000);
    expect(dead.items[0].lastError).toMatch(/cannot be delivered: alone it takes a \d+-byte message, and a delivery message to this worker is at most 4194304 bytes/);
  });

  it("on a SIMPLE queue (no dead letters) such an item is dropped and logged; its neighbours are delivered", async () => {
    const Q = "{sized-simple}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.SIMPLE });
    await t.sy.client.enqueue(Q, ["before", { payload: "big", headers: { big: "x".repeat(5_000_000) } }, "after"]);
    const session = t.sy.client.lease(Q, 3);
    const got = await takeAndAck(session, 2);
    expect(got.map((d) => Buffer.from(d.payload).toString())).toEqual(["before", "after"]);
    expect(await stillOpen(session)).toBe(true);
    await session.close();
    expect(await counts(Q)).toEqual({ ready: 0, processing: 0, deadLetter: 0 });
    expect(lines.some((l) => l.includes("dropping an item of a simple queue that fits no delivery message") && l.includes(Q))).toBe(true);
  });

  it("the same item reaches a worker that announces a receive limit it fits", async () => {
    const Q = "{sized-big-announced}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await t.sy.client.enqueue(Q, [{ payload: "big", headers: { big: "x".repeat(5_000_000) } }, "small"]);
    const got = await withReceiveLimit(16 * MiB, async (wide) => {
      const session = wide.lease(Q, 2);
      const delivered = await takeAndAck(session, 2);
      await session.close();
      return delivered;
    });
    expect(got.map((d) => Buffer.from(d.payload).toString())).toEqual(["big", "small"]);
    expect(got[0].headers.big).toHaveLength(5_000_000);
    await expect.poll(() => counts(Q)).toEqual({ ready: 0, processing: 0, deadLetter: 0 });
  });

  it("100 items of 1 MiB at credit 100 stay under the server's own send limit (64 MiB) for a worker that announces more", async () => {
    const Q = "{sized-100}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await enqueueMiB(Q, 100);
    await withReceiveLimit(256 * MiB, async (wide) => {
      const session = wide.lease(Q, 100);
      const got = await takeAndAck(session, 100);
      expect(got.every((d) => d.payload.length === MiB)).toBe(true);
      expect(new Set(got.map((d) => d.fence)).size).toBe(100);
      expect(await stillOpen(session)).toBe(true);
      await session.close();
    });
    await expect.poll(() => counts(Q)).toEqual({ ready: 0, processing: 0, deadLetter: 0 });
  });

  it("refuses an announced receive limit too small to be meant, naming the field", async () => {
    const Q = "{sized-tiny}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const err = (await withReceiveLimit(1000, (tiny) => tiny.lease(Q, 1).ended)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/max_message_bytes is 1000; announce at least 65536/);
  });
});
