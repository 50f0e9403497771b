/**
 * A stream's credit frees as soon as its ack (retry, drop) is sent to Redis,
 * not when Redis answers, so the next lease goes out right behind the settle;
 * the delivery stays held until the settle lands, and counts against the
 * credit again when Redis could not be asked. Real Redis, real instance.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { Delivery, LeaseSink, LeaseStream } from "../../src/queue/lease-stream.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: StandaloneRedis;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startStandaloneRedis();
  sy = await startSwitchyard(redis);
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

/** A stream with credit 1 on `queue`, opened on the instance itself, and what it was sent. */
async function open(queue: string): Promise<{ stream: LeaseStream; delivered: Delivery[] }> {
  const delivered: Delivery[] = [];
  const sink: LeaseSink = { deliver: (b) => delivered.push(...b), heartbeat() {}, fail() {}, drain() {}, end() {} };
  return { stream: await sy.app.queues.openStream(queue, 1, sink), delivered };
}

describe("credit freed when a settle is sent", () => {
  it("leases the next item while the ack waits for Redis, and releases the acked one once it lands", async () => {
    await sy.client.createQueue({ name: "{early}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{early}", ["one", "two"]);
    const { stream, delivered } = await open("{early}");
    await expect.poll(() => delivered.length).toBe(1);
    expect(stream.free()).toBe(0);

    // Redis holds every write for a while: the ack cannot land, the next lease not either.
    await redis.plain.call("CLIENT", "PAUSE", "3000", "WRITE");
    const acked = sy.app.queues.ackMany([delivered[0].token], stream);
    // Credit 1 is free again before Redis has answered the ack.
    await expect.poll(() => stream.free(), { timeout: 1000 }).toBe(1);
    expect(stream.held.has(delivered[0].token)).toBe(true);
    await redis.plain.call("CLIENT", "UNPAUSE");

    expect(await acked).toEqual([]);
    await expect.poll(() => delivered.map((d) => Buffer.from(d.item.payload).toString())).toEqual(["one", "two"]);
    expect([...stream.held.keys()]).toEqual([delivered[1].token]);
    expect(stream.settling.size).toBe(0);
    expect(stream.free()).toBe(0);
    await sy.app.queues.closeStream(stream);
    expect(await redis.plain.llen("{early}")).toBe(1); // "two", returned; "one" acked and gone
  });

  it("counts a delivery against the credit again when its ack could not reach Redis", async () => {
    await sy.client.createQueue({ name: "{early-down}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{early-down}", ["held"]);
    const { stream, delivered } = await open("{early-down}");
    await expect.poll(() => delivered.length).toBe(1);
    await redis.server.stop();
    await expect(sy.app.queues.ackMany([delivered[0].token], stream)).rejects.toThrow();
    expect(stream.settling.size).toBe(0);
    expect(stream.held.has(delivered[0].token)).toBe(true);
    expect(stream.free()).toBe(0);
    // Its item cannot go back while Redis is gone; end the stream so shutting down does not try again.
    await expect(sy.app.queues.closeStream(stream)).rejects.toThrow();
  });
});
