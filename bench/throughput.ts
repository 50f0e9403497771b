/**
 * Rows 1–4 and 6: enqueue throughput (batched and one per call) and
 * lease→ack throughput, Switchyard against BullMQ and raw ioredis.
 * Every function does one timed run on fresh keys, checks its result, and
 * cleans up after itself.
 */
import { Queue, Worker, type JobsOptions } from "bullmq";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { runWorker, type Worker as SyWorker } from "../dist/client/worker.js";
import type { SwitchyardClient } from "../dist/client/client.js";
import type { BenchRedis } from "./env.js";
import { deleteKeys } from "./env.js";
import { deferred, now, payload, pool, waitFor, within } from "./lib.js";

export const PAYLOAD = payload(100);
const PAYLOAD_TEXT = PAYLOAD.toString("latin1");
/** BullMQ jobs are removed when done, as Switchyard's ack removes the item (the cheaper setting for BullMQ). */
export const BULL_OPTS: JobsOptions = { removeOnComplete: true, removeOnFail: true };

let seq = 0;
/** A fresh name; `{…}` keeps a Switchyard queue's keys in one slot. */
export const fresh = (prefix: string) => `${prefix}-${process.pid}-${++seq}`;

export interface Ctx {
  redis: BenchRedis;
  client: SwitchyardClient;
}

/** Items per second. */
const rate = (items: number, ms: number) => (items / ms) * 1000;

/** Declares a fresh queue (reliable with a recovery set, min_idle 60 s, when `recovery`); resolves to its name. */
export async function syQueue(client: SwitchyardClient, prefix: string, mode: "reliable" | "simple", recovery: boolean): Promise<string> {
  const name = `{${fresh(prefix)}}`;
  await client.createQueue({
    name,
    mode: mode === "reliable" ? QueueMode.RELIABLE : QueueMode.SIMPLE,
    ...(recovery ? { recoverySet: `${name}.claims`, minIdle: { seconds: 60n } } : {}),
  });
  return name;
}

async function syDrop(ctx: Ctx, name: string): Promise<void> {
  await ctx.client.deleteQueue(name, { purge: true });
}

async function bullDrop(ctx: Ctx, queue: Queue): Promise<void> {
  await queue.close();
  await deleteKeys(ctx.redis.plain, `bull:${queue.name}:*`);
}

// ---------------------------------------------------------------- enqueue

/** Enqueue `items` in calls of `perCall`, `inFlight` calls at once. */
export async function syEnqueue(ctx: Ctx, items: number, perCall: number, inFlight: number, client = ctx.client): Promise<number> {
  const name = await syQueue(ctx.client, "enq", "reliable", false);
  const batch = Array.from({ length: perCall }, () => PAYLOAD);
  const t0 = now();
  await pool(items / perCall, inFlight, () => client.enqueue(name, batch));
  const ms = now() - t0;
  const len = await ctx.redis.plain.llen(name);
  if (len !== items) throw new Error(`switchyard enqueue: ${len} items in ${name}, expected ${items}`);
  await syDrop(ctx, name);
  return rate(items, ms);
}

export async function bullEnqueue(ctx: Ctx, items: number, perCall: number, inFlight: number): Promise<number> {
  const queue = new Queue(fresh("enq"), { connection: ctx.redis.peerOptions });
  await queue.waitUntilReady();
  const jobs = Array.from({ length: perCall }, () => ({ name: "j", data: PAYLOAD_TEXT, opts: BULL_OPTS }));
  const t0 = now();
  await pool(items / perCall, inFlight, () => (perCall === 1 ? queue.add("j", PAYLOAD_TEXT, BULL_OPTS) : queue.addBulk(jobs)));
  const ms = now() - t0;
  const waiting = await queue.getWaitingCount();
  if (waiting !== items) throw new Error(`bullmq enqueue: ${waiting} jobs waiting, expected ${items}`);
  await bullDrop(ctx, queue);
  return rate(items, ms);
}

/** The same Redis work with no framework: LPUSH of `perCall` values. */
export async function rawEnqueue(ctx: Ctx, items: number, perCall: number, inFlight: number): Promise<number> {
  const key = fresh("raw");
  const values = Array.from({ length: perCall }, () => PAYLOAD);
  const t0 = now();
  await pool(items / perCall, inFlight, () => ctx.redis.plain.lpush(key, ...values));
  const ms = now() - t0;
  const len = await ctx.redis.plain.llen(key);
  if (len !== items) throw new Error(`raw enqueue: ${len} items, expected ${items}`);
  await ctx.redis.plain.unlink(key);
  return rate(items, ms);
}

// ---------------------------------------------------------------- lease → ack

export interface LeaseShape {
  items: number;
  streams: number;
  credit: number;
}

/**
 * Prefills a queue (not timed), then 10 runWorker streams with credit 100 and
 * a no-op handler lease and ack it empty. The clock stops when the last item
 * is settled in Redis: the processing list is empty (reliable), or the last
 * item was handed to a handler (simple: the item left Redis when popped).
 */
export async function syLeaseAck(ctx: Ctx, mode: "reliable" | "simple", shape: LeaseShape): Promise<number> {
  const name = await syQueue(ctx.client, mode === "reliable" ? "rel" : "simple", mode, mode === "reliable");
  const batch = Array.from({ length: 1000 }, () => PAYLOAD);
  await pool(Math.ceil(shape.items / 1000), 4, () => ctx.client.enqueue(name, batch));
  let handled = 0;
  const all = deferred();
  const handler = () => {
    if (++handled === shape.items) all.resolve();
  };
  const t0 = now();
  const workers: SyWorker[] = Array.from({ length: shape.streams }, () =>
    runWorker({ client: ctx.client, queue: name, concurrency: shape.credit, handler, onError: (err) => all.reject(err) }),
  );
  await within(all.promise, 120_000, `switchyard ${mode} lease of ${shape.items} items`);
  if (mode === "reliable") {
    await waitFor(async () => (await ctx.redis.plain.llen(`${name}.processing`)) === 0, 60_000, "acks to be applied", 1);
  }
  const ms = now() - t0;
  await Promise.all(workers.map((w) => w.stop()));
  const left = await ctx.redis.plain.llen(name);
  if (left !== 0) throw new Error(`switchyard ${mode} lease: ${left} items left`);
  if (handled !== shape.items) throw new Error(`switchyard ${mode} lease: ${handled} handled, expected ${shape.items}`);
  await syDrop(ctx, name);
  return rate(shape.items, ms);
}

/** BullMQ: prefill with addBulk (not timed), then one Worker with concurrency `streams × credit / 10`… as the issue says: 100. */
export async function bullLeaseAck(ctx: Ctx, items: number, concurrency: number): Promise<number> {
  const queue = new Queue(fresh("bw"), { connection: ctx.redis.peerOptions });
  const jobs = Array.from({ length: 1000 }, () => ({ name: "j", data: PAYLOAD_TEXT, opts: BULL_OPTS }));
  await pool(Math.ceil(items / 1000), 4, () => queue.addBulk(jobs));
  let completed = 0;
  const all = deferred();
  const t0 = now();
  const worker = new Worker(queue.name, async () => undefined, { connection: ctx.redis.peerOptions, concurrency });
  worker.on("completed", () => {
    if (++completed === items) all.resolve();
  });
  worker.on("failed", (_job, err) => all.reject(err));
  worker.on("error", (err) => all.reject(err));
  await within(all.promise, 180_000, `bullmq worker on ${items} jobs`);
  const ms = now() - t0;
  await worker.close();
  const left = await queue.getJobCounts("waiting", "active", "completed", "failed");
  if (left.waiting || left.active || left.failed) throw new Error(`bullmq worker: jobs left ${JSON.stringify(left)}`);
  await bullDrop(ctx, queue);
  return rate(items, ms);
}
