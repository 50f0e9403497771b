/**
 * Workers that open a Lease stream with a large credit and never read it
 * (issue 17): the server stops giving such a stream deliveries once the bytes
 * it wrote and the connection has not taken pass SWITCHYARD_LEASE_STREAM_BUFFER_BYTES,
 * or those of all streams pass SWITCHYARD_LEASE_BUFFER_BYTES, instead of
 * holding credit × payload in memory. Well-behaved workers take the rest.
 */
import { afterEach, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { rawLease, type RawLease } from "../helpers/raw-lease.js";
import { scrape } from "../helpers/http.js";

const ITEM = 100_000;
const ITEMS = 200;
const MiB = 1024 * 1024;

let redis: StandaloneRedis | undefined;
let sy: TestSwitchyard | undefined;
const stuck: RawLease[] = [];

afterEach(async () => {
  for (const s of stuck.splice(0)) s.close();
  await sy?.stop();
  await redis?.stop();
  sy = redis = undefined;
});

/** 200 items of 100 KB on a reliable queue; `n` workers that never read open streams of credit 1,000, then one that acks takes the rest. */
async function stuckConsumers(n: number, config: { maxStreamBufferBytes: number; maxBufferedBytes: number }) {
  redis = await startStandaloneRedis();
  sy = await startSwitchyard(redis, { config: { ...config, leaseBatch: 8 } });
  const Q = "{stuck}";
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  await sy.client.enqueue(Q, Array.from({ length: ITEMS }, (_, i) => Buffer.alloc(ITEM, i % 256)));
  for (let i = 0; i < n; i++) {
    const s = rawLease(sy.address, { read: false });
    stuck.push(s);
    s.send({ case: "open", value: { queue: Q, credit: 1000 } });
  }
  await expect.poll(() => redis!.plain.llen(`${Q}.processing`)).toBeGreaterThanOrEqual(8 * n);
  // A worker that reads and acks: it takes whatever the stuck ones are not given.
  const worker = sy.client.lease(Q, 10);
  let acked = 0;
  void (async () => {
    for await (const d of worker) {
      worker.ack(d.leaseToken);
      acked++;
    }
  })();
  // Every item taken: the queue is empty and every ack the worker sent is applied. A message on its
  // way to the worker still counts in the buffered bytes and its items in processing, so the worker
  // closes (its unread items go back) before the stuck streams' share is read.
  await expect.poll(async () => (await redis!.plain.llen(Q)) === 0 && (await redis!.plain.llen(`${Q}.processing`)) === ITEMS - acked, {
    timeout: 15_000,
  }).toBe(true);
  await worker.close();
  const held = await redis.plain.llen(`${Q}.processing`);
  const buffered = (await scrape(sy.app.httpAddress)).get("switchyard_lease_buffered_bytes") ?? NaN;
  return { held, buffered };
}

describe("a worker that never reads", () => {
  it("is given deliveries only until the stream holds SWITCHYARD_LEASE_STREAM_BUFFER_BYTES not taken; the others take the rest", async () => {
    const { held, buffered } = await stuckConsumers(1, { maxStreamBufferBytes: 1 * MiB, maxBufferedBytes: 64 * MiB });
    // The bound, plus one delivery message (8 items) and what flow control let through before the stream's window closed.
    expect(held).toBeLessThanOrEqual(30);
    expect(buffered).toBeGreaterThanOrEqual(1 * MiB);
    expect(buffered).toBeLessThanOrEqual(1 * MiB + 8 * (ITEM + 200));
  });

  it("several of them hold at most SWITCHYARD_LEASE_BUFFER_BYTES over the instance", async () => {
    const { held, buffered } = await stuckConsumers(3, { maxStreamBufferBytes: 8 * MiB, maxBufferedBytes: 2 * MiB });
    expect(held).toBeLessThanOrEqual(60);
    expect(buffered).toBeLessThanOrEqual(2 * MiB + 3 * 8 * (ITEM + 200));
  });
});
