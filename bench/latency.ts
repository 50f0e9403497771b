/**
 * Row 5: enqueue → delivery latency at a paced 500 items/s, one producer and
 * one waiting worker. Each payload carries its sequence number; the send time
 * is taken just before the enqueue call and the receive time when the handler
 * starts, both on this process's monotonic clock.
 */
import { Queue, Worker } from "bullmq";
import { runWorker } from "../dist/client/worker.js";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { BULL_OPTS, fresh, type Ctx } from "./throughput.js";
import { deleteKeys } from "./env.js";
import { now, payload, percentile, seqOf, sleep, waitFor } from "./lib.js";

export interface LatencyResult {
  p50: number;
  p99: number;
}

export interface LatencyShape {
  ratePerSec: number;
  /** The worker's credit (Switchyard) and concurrency (BullMQ). */
  concurrency: number;
  items: number;
  warmup: number;
}

/** Sends `count` items at `ratePerSec`, open loop (a late timer sends the items it owes at once). */
async function paced(count: number, ratePerSec: number, send: (i: number) => Promise<unknown>): Promise<void> {
  const gap = 1000 / ratePerSec;
  const t0 = now();
  const inflight: Promise<unknown>[] = [];
  for (let i = 0; i < count; i++) {
    const due = t0 + i * gap;
    const wait = due - now();
    if (wait >= 1) await sleep(wait);
    inflight.push(send(i));
  }
  await Promise.all(inflight);
}

function summarise(sent: Float64Array, received: Float64Array, from: number): LatencyResult {
  const lat: number[] = [];
  for (let i = from; i < sent.length; i++) lat.push(received[i] - sent[i]);
  return { p50: percentile(lat, 50), p99: percentile(lat, 99) };
}

export async function syLatency(ctx: Ctx, shape: LatencyShape): Promise<LatencyResult> {
  const name = `{${fresh("lat")}}`;
  await ctx.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });
  const total = shape.warmup + shape.items;
  const sent = new Float64Array(total);
  const received = new Float64Array(total);
  let got = 0;
  const worker = runWorker({
    client: ctx.client,
    queue: name,
    concurrency: shape.concurrency,
    handler: (d) => {
      received[seqOf(d.payload)] = now();
      got++;
    },
  });
  await sleep(200); // the stream is open and its pump waits on the empty queue
  await paced(total, shape.ratePerSec, (i) => {
    const p = payload(100, i);
    sent[i] = now();
    return ctx.client.enqueue(name, [p]);
  });
  await waitFor(() => got === total, 30_000, "every latency item to arrive");
  await worker.stop();
  await ctx.client.deleteQueue(name, { purge: true });
  return summarise(sent, received, shape.warmup);
}

export async function bullLatency(ctx: Ctx, shape: LatencyShape): Promise<LatencyResult> {
  const queue = new Queue(fresh("lat"), { connection: ctx.redis.peerOptions });
  await queue.waitUntilReady();
  const total = shape.warmup + shape.items;
  const sent = new Float64Array(total);
  const received = new Float64Array(total);
  let got = 0;
  const worker = new Worker(
    queue.name,
    async (job) => {
      received[seqOf(job.data as string)] = now();
      got++;
    },
    { connection: ctx.redis.peerOptions, concurrency: shape.concurrency },
  );
  await worker.waitUntilReady();
  await sleep(200);
  await paced(total, shape.ratePerSec, (i) => {
    const data = payload(100, i).toString("latin1");
    sent[i] = now();
    return queue.add("j", data, BULL_OPTS);
  });
  await waitFor(() => got === total, 30_000, "every latency job to start");
  await worker.close();
  await queue.close();
  await deleteKeys(ctx.redis.plain, `bull:${queue.name}:*`);
  return summarise(sent, received, shape.warmup);
}
