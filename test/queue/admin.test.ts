/**
 * The operator's actions the dashboard offers: PurgeQueue, RequeueDeadLetters
 * and DeleteDeadLetters, on real Redis through real gRPC.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { SwitchyardClient } from "../../src/client/client.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
const text = (b: Uint8Array) => Buffer.from(b).toString();

/** Declares a reliable queue with max_deliveries 1 and sends `payloads` to its dead-letter list; resolves to their ids. */
async function deadLetters(client: SwitchyardClient, name: string, payloads: string[]): Promise<string[]> {
  await client.createQueue({ name, mode: QueueMode.RELIABLE, maxDeliveries: 1 });
  const ids = await client.enqueue(name, payloads);
  const lease = client.lease(name, payloads.length);
  const ds = await lease.take(payloads.length);
  for (const d of ds) expect((await client.retry(d.leaseToken)).deadLettered).toBe(true);
  await lease.close();
  return ids;
}

async function status(call: Promise<unknown>): Promise<{ code: number; details: string }> {
  try {
    await call;
    return { code: grpc.status.OK, details: "" };
  } catch (err) {
    const e = err as grpc.ServiceError;
    return { code: e.code, details: e.details };
  }
}

describe("PurgeQueue", () => {
  it("deletes the waiting items only: leased items stay and can still be acked", async () => {
    const { client } = t.sy;
    await client.createQueue({ name: "{pg}", mode: QueueMode.RELIABLE });
    await client.enqueue("{pg}", ["1", "2", "3", "4", "5"]);
    const lease = client.lease("{pg}", 2);
    const held = await lease.take(2);
    lease.setCredit(0);
    expect(await client.purgeQueue("{pg}")).toBe(3);
    expect(await t.redis.plain.llen("{pg}")).toBe(0);
    expect(await t.redis.plain.llen("{pg}.processing")).toBe(2);
    for (const d of held) await client.ack(d.leaseToken);
    expect(await client.getQueueStats("{pg}")).toMatchObject({ ready: 0n, processing: 0n });
    await lease.close();
    expect(await client.purgeQueue("{pg}")).toBe(0);
  });
});

describe("RequeueDeadLetters", () => {
  it("moves the named dead letters back with a fresh delivery count and the same id", async () => {
    const { client } = t.sy;
    const [a, b] = await deadLetters(client, "{rq}", ["a", "b"]);
    expect(await client.requeueDeadLetters("{rq}", { ids: [a, "no-such-id"] })).toBe(1);
    const dead = await client.peekQueue("{rq}", QueueList.DEAD_LETTER);
    expect(dead.items.map((i) => i.id)).toEqual([b]);
    const lease = client.lease("{rq}", 1);
    const [d] = await lease.take(1);
    expect([d.id, text(d.payload), d.deliveryCount]).toEqual([a, "a", 1]);
    await client.ack(d.leaseToken);
    await lease.close();
    expect(await client.getQueueStats("{rq}")).toMatchObject({ ready: 0n, processing: 0n, deadLetter: 1n });
  });

  it("with all, moves every dead letter, raw ones too, oldest first, in batches past 1000", async () => {
    const { client } = t.sy;
    await deadLetters(client, "{ra}", ["first"]);
    const raw = Array.from({ length: 2500 }, (_, i) => `raw ${i}`);
    for (let i = 0; i < raw.length; i += 500) await t.redis.plain.lpush("{ra}.dead", ...raw.slice(i, i + 500));
    expect(await client.requeueDeadLetters("{ra}", "all")).toBe(2501);
    expect(await t.redis.plain.llen("{ra}.dead")).toBe(0);
    const next = await client.peekQueue("{ra}", QueueList.READY, 3);
    expect(next.total).toBe(2501n);
    expect(next.items.map((i) => text(i.payload))).toEqual(["first", "raw 0", "raw 1"]);
  });

  it("refuses what it cannot do with a status that says what to fix, changing nothing", async () => {
    const { client } = t.sy;
    const [id] = await deadLetters(client, "{rb}", ["x"]);
    await client.createQueue({ name: "{rs}", mode: QueueMode.SIMPLE });
    const both = await status(callRaw(client, { name: "{rb}", ids: [id], all: true }));
    expect(both).toEqual({ code: grpc.status.INVALID_ARGUMENT, details: "give either ids or all, not both" });
    expect((await status(client.requeueDeadLetters("{rb}", { ids: [] }))).code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(await status(client.requeueDeadLetters("{rb}", { ids: [""] }))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: "ids must not be empty; raw dead letters have no id: use all",
    });
    expect(await status(client.requeueDeadLetters("{rs}", "all"))).toEqual({
      code: grpc.status.FAILED_PRECONDITION,
      details: 'queue "{rs}" is SIMPLE and has no dead-letter list',
    });
    expect((await status(client.requeueDeadLetters("{nope}", "all"))).code).toBe(grpc.status.NOT_FOUND);
    expect((await status(client.requeueDeadLetters("{rb}", { ids: Array.from({ length: 1001 }, (_, i) => `id${i}`) }))).code)
      .toBe(grpc.status.INVALID_ARGUMENT);
    expect(await t.redis.plain.llen("{rb}.dead")).toBe(1);
  });
});

/** RequeueDeadLetters with both ids and all, which the client's API cannot express. */
function callRaw(client: SwitchyardClient, request: { name: string; ids: string[]; all: boolean }): Promise<unknown> {
  return (client as unknown as { call(m: string, r: object): Promise<unknown> }).call("requeueDeadLetters", request);
}

describe("DeleteDeadLetters", () => {
  it("deletes the named dead letters, or all of them", async () => {
    const { client } = t.sy;
    const [a, b, c] = await deadLetters(client, "{dd}", ["a", "b", "c"]);
    expect(await client.deleteDeadLetters("{dd}", { ids: [b] })).toBe(1);
    expect((await client.peekQueue("{dd}", QueueList.DEAD_LETTER)).items.map((i) => i.id)).toEqual([a, c]);
    expect(await client.deleteDeadLetters("{dd}", "all")).toBe(2);
    expect(await t.redis.plain.exists("{dd}.dead")).toBe(0);
    expect(await t.redis.plain.llen("{dd}")).toBe(0);
  });
});

describe("GetQueueStats counters (the dashboard's throughput)", () => {
  it("count items leased, and completed: acked or dropped (reliable), leased (simple)", async () => {
    const { client } = t.sy;
    await client.createQueue({ name: "{ct}", mode: QueueMode.RELIABLE });
    await client.enqueue("{ct}", ["1", "2"]);
    await client.enqueue("{ct}", ["3", "4", "5"]);
    const lease = client.lease("{ct}", 3);
    const [a, b, c] = await lease.take(3);
    lease.setCredit(0);
    await client.ack(a.leaseToken);
    await client.drop(b.leaseToken);
    await client.retry(c.leaseToken);
    await lease.close();
    expect(await client.getQueueStats("{ct}")).toMatchObject({ leasedTotal: 3n, completedTotal: 2n, ready: 3n });

    await client.createQueue({ name: "{cs}", mode: QueueMode.SIMPLE });
    await client.enqueue("{cs}", ["x", "y", "z"]);
    const simple = client.lease("{cs}", 2);
    await simple.take(2);
    await simple.close();
    expect(await client.getQueueStats("{cs}")).toMatchObject({ leasedTotal: 2n, completedTotal: 2n, ready: 1n });
  });
});
