/**
 * The seed's image service end to end: `cache.warmups` simple queue,
 * `{thumbnails}` reliable with a recovery set, and `uploads`, a Redis Stream
 * read by the consumer group `thumbnailer` (a Python worker, examples/python/worker.py)
 * whose ack replies onto `{thumbnails}` with a 24 h publish TTL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { preparePython, type PythonWorker } from "../helpers/python.js";

const MIN_IDLE_MS = 60_000;
const DAY_MS = 24 * 60 * 60 * 1000;
const text = (b: Uint8Array) => Buffer.from(b).toString();

let redis: TestRedis;
let sy: TestSwitchyard;
let python: PythonWorker | undefined;
beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  await sy.client.createQueue({ name: "cache.warmups", mode: QueueMode.SIMPLE });
  await sy.client.createQueue({
    name: "{thumbnails}",
    mode: QueueMode.RELIABLE,
    minIdle: durationFromMs(MIN_IDLE_MS),
    recoverySet: "{thumbnails}.claims",
  });
  await sy.client.createQueue({ name: "uploads", mode: QueueMode.STREAM, groups: [{ name: "thumbnailer" }] });
  python = await preparePython();
});
afterAll(async () => {
  python?.cleanup();
  await sy.stop();
  await redis.stop();
});

describe("image service (seed 000)", () => {
  it("pops a cache warm-up before the worker runs, so the simple queue is at most once", async () => {
    await sy.client.enqueue("cache.warmups", [JSON.stringify({ page: "/home" })]);
    const lease = sy.client.lease("cache.warmups", 1);
    const [warmup] = await lease.take(1);
    expect(JSON.parse(text(warmup.payload))).toEqual({ page: "/home" });
    // Already gone from Redis while the worker holds it: nothing to recover.
    expect(await redis.plain.exists("cache.warmups")).toBe(0);
    expect(await redis.plain.exists("cache.warmups.processing")).toBe(0);
    // Settling a simple item is accepted and changes nothing.
    await sy.client.ack(warmup.leaseToken);
    await lease.close();
  });

  it("reads uploads from a stream in group thumbnailer (a Python worker) and replies onto {thumbnails} with a 24 h TTL on each push; a TS worker renders", { timeout: 60_000 }, async () => {
    // A producer that knows nothing of Switchyard: a plain XADD.
    const first = (await redis.plain.xadd("uploads", "*", "payload", JSON.stringify({ image: "cat.png" })))!;
    const thumbnailer = ["--address", sy.address, "--queue", "uploads", "--group", "thumbnailer", "--work", "1", "--reply-queue", "{thumbnails}", "--reply-ttl", "86400"];
    const one = JSON.parse(await python!.run(thumbnailer)) as { deliveries: { id: string; payload: string; delivery_count: number; reply_ids: string[] }[] };
    expect(one.deliveries).toMatchObject([{ id: first, payload: JSON.stringify({ image: "cat.png" }), delivery_count: 1 }]);
    const expectDayTtl = async () => {
      const ttl = await redis.plain.pttl("{thumbnails}");
      expect(ttl).toBeGreaterThan(DAY_MS - 60_000);
      expect(ttl).toBeLessThanOrEqual(DAY_MS);
    };
    await expectDayTtl();
    // The upload stays in the stream as history, acked in its group.
    expect(await redis.plain.xlen("uploads")).toBe(1);
    expect(await redis.plain.xpending("uploads", "thumbnailer")).toEqual([0, null, null, null]);

    // A day later the reply list would be gone; each push sets its expiry to 24 h again.
    await redis.plain.pexpire("{thumbnails}", 5000);
    const second = (await redis.plain.xadd("uploads", "*", "payload", JSON.stringify({ image: "dog.png" })))!;
    const two = JSON.parse(await python!.run(thumbnailer)) as typeof one;
    expect(two.deliveries.map((d) => d.id)).toEqual([second]);
    await expectDayTtl();

    // The render worker (TypeScript) takes the jobs from the reliable list.
    const renders = sy.client.lease("{thumbnails}", 2);
    const jobs = await renders.take(2);
    expect(jobs.map((j) => j.id).sort()).toEqual([...one.deliveries[0].reply_ids, ...two.deliveries[0].reply_ids].sort());
    expect(jobs.map((j) => JSON.parse(text(j.payload)) as unknown)).toEqual(expect.arrayContaining([{ image: "cat.png" }, { image: "dog.png" }]));
    expect(await redis.plain.llen("{thumbnails}.processing")).toBe(2);
    expect(await redis.plain.zcard("{thumbnails}.claims")).toBe(2);
    await Promise.all(jobs.map((j) => sy.client.ack(j.leaseToken)));
    expect(await redis.plain.llen("{thumbnails}.processing")).toBe(0);
    expect(await redis.plain.zcard("{thumbnails}.claims")).toBe(0);
    expect(await redis.plain.llen("{thumbnails}")).toBe(0);
    await renders.close();
  });

  it("every push resets the queue's expiry, so a queue in use never expires", async () => {
    await sy.client.enqueue("{thumbnails}", ["a"], { ttlMs: 1000 });
    expect(await redis.plain.pttl("{thumbnails}")).toBeLessThanOrEqual(1000);
    await sy.client.enqueue("{thumbnails}", ["b"], { ttlMs: DAY_MS });
    expect(await redis.plain.pttl("{thumbnails}")).toBeGreaterThan(1000);
    await redis.plain.del("{thumbnails}");
  });
});
