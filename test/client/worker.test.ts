/** The worker helper and settling from any instance. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let a: TestSwitchyard;
let b: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  a = await startSwitchyard(redis);
  b = await startSwitchyard(redis);
});
afterAll(async () => {
  await Promise.all([a.stop(), b.stop()]);
  await redis.stop();
});

describe("runWorker", () => {
  it("acks what the handler finishes and retries what it throws on", async () => {
    const Q = "{work}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const ids = await a.client.enqueue(Q, Array.from({ length: 20 }, (_, i) => `job-${i}`));
    const seen = new Map<string, number>();
    const worker = runWorker({
      client: a.client,
      queue: Q,
      concurrency: 5,
      handler: (d) => {
        seen.set(d.id, d.deliveryCount);
        if (Buffer.from(d.payload).toString() === "job-7" && d.deliveryCount === 1) throw new Error("flaky");
      },
    });
    await expect.poll(() => worker.processed, { timeout: 10_000 }).toBe(21);
    await worker.stop();
    expect([...seen.keys()].sort()).toEqual([...ids].sort());
    expect(seen.get(ids[7])).toBe(2);
    expect(await redis.plain.llen(Q)).toBe(0);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });

  it("sends the handler's reply with the ack", async () => {
    await a.client.createQueue({ name: "{in}", mode: QueueMode.RELIABLE });
    await a.client.createQueue({ name: "{out}", mode: QueueMode.RELIABLE });
    await a.client.enqueue("{in}", ["cat.png"]);
    const worker = runWorker({
      client: a.client,
      queue: "{in}",
      concurrency: 1,
      handler: (d) => ({ reply: { queue: "{out}", items: [`thumb:${Buffer.from(d.payload).toString()}`] } }),
    });
    await expect.poll(() => redis.plain.llen("{out}")).toBe(1);
    await worker.stop();
    const out = b.client.lease("{out}", 1);
    const [reply] = await out.take(1);
    expect(Buffer.from(reply.payload).toString()).toBe("thumb:cat.png");
    await out.close();
  });
});

describe("settling on another instance", () => {
  it("acks on instance B an item leased through instance A, and frees nothing B does not hold", async () => {
    const Q = "{cross}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await b.client.enqueue(Q, ["x"]);
    const lease = a.client.lease(Q, 1);
    const [d] = await lease.take(1);
    await b.client.ack(d.leaseToken);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await expect(a.client.ack(d.leaseToken)).rejects.toMatchObject({ code: 9 });
    await lease.close();
  });
});
