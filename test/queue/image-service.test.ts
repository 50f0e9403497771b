/**
 * The seed's image service end to end: `cache.warmups` simple queue,
 * `{thumbnails}` reliable with a recovery set, and an `uploads` handler whose
 * ack replies onto `{thumbnails}` with a 24 h publish TTL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const MIN_IDLE_MS = 60_000;
const DAY_MS = 24 * 60 * 60 * 1000;
const text = (b: Uint8Array) => Buffer.from(b).toString();

let redis: TestRedis;
let sy: TestSwitchyard;
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
  await sy.client.createQueue({ name: "uploads", mode: QueueMode.SIMPLE });
});
afterAll(async () => {
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

  it("replies from the uploads handler onto {thumbnails} with a 24 h TTL, and keeps the render in processing until acked", async () => {
    await sy.client.enqueue("uploads", [JSON.stringify({ image: "cat.png" })]);
    const uploads = sy.client.lease("uploads", 1);
    const [upload] = await uploads.take(1);
    const { image } = JSON.parse(text(upload.payload)) as { image: string };
    const { replyIds } = await sy.client.ack(upload.leaseToken, {
      queue: "{thumbnails}",
      items: [JSON.stringify({ image })],
      ttlMs: DAY_MS,
    });
    expect(replyIds).toHaveLength(1);
    const ttl = await redis.plain.pttl("{thumbnails}");
    expect(ttl).toBeGreaterThan(DAY_MS - 60_000);
    expect(ttl).toBeLessThanOrEqual(DAY_MS);
    await uploads.close();

    const renders = sy.client.lease("{thumbnails}", 1);
    const [job] = await renders.take(1);
    expect(job.id).toBe(replyIds[0]);
    expect(JSON.parse(text(job.payload))).toEqual({ image: "cat.png" });
    expect(job.deliveryCount).toBe(1);

    // While leased: the item sits in {thumbnails}.processing, its claim has a ms score.
    const processing = await redis.plain.lrangeBuffer("{thumbnails}.processing", 0, -1);
    expect(processing).toHaveLength(1);
    const claims = await redis.plain.zrangeBuffer("{thumbnails}.claims", 0, -1, "WITHSCORES");
    expect(claims[0].equals(processing[0])).toBe(true);
    expect(Number(claims[1].toString())).toBe(sy.clock.now());
    expect(await redis.plain.llen("{thumbnails}")).toBe(0);

    await sy.client.ack(job.leaseToken);
    expect(await redis.plain.llen("{thumbnails}.processing")).toBe(0);
    expect(await redis.plain.zcard("{thumbnails}.claims")).toBe(0);
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
