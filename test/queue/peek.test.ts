/** PeekQueue: reads a queue's ready or dead-letter list without moving anything. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

const text = (b: Uint8Array) => Buffer.from(b).toString();

describe("PeekQueue", () => {
  it("shows the ready list next-to-leave first, with delivery counts, and moves nothing", async () => {
    await sy.client.createQueue({ name: "{pk}", mode: QueueMode.RELIABLE });
    const ids = await sy.client.enqueue("{pk}", ["first", "second", { payload: "third", headers: { h: "3" } }]);
    // The first item is delivered once and retried: it goes to the back, remembering one delivery.
    const lease = sy.client.lease("{pk}", 1);
    const [d] = await lease.take(1);
    lease.setCredit(0);
    await sy.client.retry(d.leaseToken);
    await lease.close();

    const res = await sy.client.peekQueue("{pk}", QueueList.READY, 2);
    expect(res.total).toBe(3n);
    expect(res.items.map((i) => [i.id, text(i.payload), i.deliveryCount])).toEqual([
      [ids[1], "second", 0],
      [ids[2], "third", 0],
    ]);
    expect(res.items[1].headers).toEqual({ h: "3" });
    expect(res.items[1].enqueueTime).toBeDefined();
    const all = await sy.client.peekQueue("{pk}"); // READY, default limit 10
    expect(all.items.map((i) => [text(i.payload), i.deliveryCount])).toEqual([
      ["second", 0],
      ["third", 0],
      ["first", 1],
    ]);
    expect(await redis.plain.llen("{pk}")).toBe(3);
  });

  it("shows dead letters oldest first, raw ones too", async () => {
    await sy.client.createQueue({ name: "{pd}", mode: QueueMode.RELIABLE, maxDeliveries: 1 });
    await sy.client.enqueue("{pd}", ["a", "b"]);
    const lease = sy.client.lease("{pd}", 2);
    const ds = await lease.take(2);
    for (const d of ds) expect((await sy.client.retry(d.leaseToken)).deadLettered).toBe(true);
    await lease.close();
    await redis.plain.lpush("{pd}.dead", "raw dead");
    const res = await sy.client.peekQueue("{pd}", QueueList.DEAD_LETTER);
    expect(res.total).toBe(3n);
    // A dead letter keeps the deliveries it had; a raw value pushed there by another client has none.
    expect(res.items.map((i) => [text(i.payload), i.id === "", i.deliveryCount])).toEqual([
      ["a", false, 1],
      ["b", false, 1],
      ["raw dead", true, 0],
    ]);
  });

  it("refuses a bad limit, an undeclared queue, and the dead letters of a simple queue", async () => {
    await sy.client.createQueue({ name: "plain", mode: QueueMode.SIMPLE });
    await expect(sy.client.peekQueue("{pk}", QueueList.READY, 101)).rejects.toMatchObject({ code: 3, details: expect.stringContaining("limit must be between 0 and 100") });
    await expect(sy.client.peekQueue("undeclared")).rejects.toMatchObject({ code: 5 });
    await expect(sy.client.peekQueue("plain", QueueList.DEAD_LETTER)).rejects.toMatchObject({
      code: 9,
      details: 'queue "plain" is SIMPLE and has no dead-letter list',
    });
  });
});
