/**
 * Coalesces settles: every ack, retry, drop, extend or return that arrives in
 * one turn of the event loop, from streams or unary calls, goes to Redis as one
 * settle.lua call per queue.
 */
import type { Clock } from "../clock.js";
import { noMetrics, type ItemEvent, type Metrics } from "../metrics/hooks.js";
import type { RedisClient } from "../redis/connection.js";
import type { QueueKeys } from "../redis/keys.js";
import {
  policyArg, settleAndLease, settleItems, settleStreamAndLease, settleStreamItems,
  type LeaseAfter, type LeasedItem, type SettleAction, type SettleContext, type SettleOp, type SettleResult,
  type StreamLease, type StreamLeaseArgs,
} from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";

/** A caller waiting for the results of its ops: `count` of them from `from` in its batch. */
interface Waiter {
  from: number;
  count: number;
  resolve: (results: SettleResult[]) => void;
  reject: (err: unknown) => void;
}

/**
 * A lease sent beside settles, in the same script call, resolving to what it
 * leased: `list` for a reliable queue (settle-lease.lua), `stream` for a
 * STREAM queue's group (stream-settle-lease.lua); the other one rejects.
 */
export interface LeaseBeside {
  list(lease: LeaseAfter): Promise<LeasedItem[]>;
  stream(lease: StreamLeaseArgs): Promise<StreamLease>;
}

/**
 * Offers the settles `ops` of a reliable or STREAM queue, as they go to Redis,
 * to carry the lease the credit they free asks for: `send` leases beside them
 * in the same call, if the queue's pump takes it up (QueueDispatcher.leaseBeside);
 * false if it does not (they go alone, and free their credit with their answer).
 */
export type Refill = (config: QueueConfig, ops: readonly SettleOp[], send: LeaseBeside) => boolean;

interface Pending {
  config: QueueConfig;
  ops: SettleOp[];
  waiters: Waiter[];
}

/** The most settles sent in one script call. */
const CHUNK = 1000;

/** What a settle that applied did to its item; undo, extend and check move nothing worth counting. */
const applied: Partial<Record<SettleAction, ItemEvent>> = { ack: "acked", drop: "dropped", retry: "retried", return: "returned" };

/** Counts the settles of one script call that changed an item. */
function count(metrics: Metrics, queue: string, ops: readonly SettleOp[], results: readonly SettleResult[]): void {
  const counts = new Map<ItemEvent, number>();
  ops.forEach((op, i) => {
    const code = results[i].code;
    const event = code === "dead_lettered" ? "dead_lettered" : code === "done" ? applied[op.action] : undefined;
    if (event) counts.set(event, (counts.get(event) ?? 0) + 1);
  });
  for (const [event, n] of counts) metrics.items(queue, event, n);
}

export class Settler {
  private pending = new Map<string, Pending>();
  private scheduled = false;

  constructor(
    private readonly client: RedisClient,
    private readonly clock: Clock,
    private readonly metrics: Metrics = noMetrics,
    private readonly refill?: Refill,
  ) {}

  /** Applies `op` with the next batch; resolves to its result. */
  async settle(config: QueueConfig, op: SettleOp): Promise<SettleResult> {
    return (await this.settleMany(config, [op]))[0];
  }

  /** Applies `ops` with the next batch, in order; resolves to their results, one per op. */
  settleMany(config: QueueConfig, ops: readonly SettleOp[]): Promise<SettleResult[]> {
    if (ops.length === 0) return Promise.resolve([]);
    let batch = this.pending.get(config.name);
    if (!batch) {
      batch = { config, ops: [], waiters: [] };
      this.pending.set(config.name, batch);
    }
    batch.config = config; // the newest declaration wins (an UpdateQueue may land between two settles)
    const from = batch.ops.length;
    for (const op of ops) batch.ops.push(op);
    const result = new Promise<SettleResult[]>((resolve, reject) => batch.waiters.push({ from, count: ops.length, resolve, reject }));
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
    return result;
  }

  private flush(): void {
    this.scheduled = false;
    const batches = [...this.pending.values()];
    // A new Map, not clear(). V8 links a cleared hash table to its successor (for iterators), so
    // once one table of this Map is in the old generation, every scavenge keeps each later table,
    // and the batches they held, until the next mark-compact. At 500 items/s clear() left the
    // server about 0.2 MB more per scavenge to copy and promote (bench/README.md, 4 December).
    this.pending = new Map();
    for (const batch of batches) void this.apply(batch);
  }

  /** One settle call; a reliable or STREAM queue's last one offers to carry its pump's next lease (Refill). */
  private send(config: QueueConfig, keys: QueueKeys, ctx: SettleContext, ops: SettleOp[], last: boolean): Promise<SettleResult[]> {
    const stream = config.mode === "stream";
    const alone = () => (stream ? settleStreamItems : settleItems)(this.client, keys, ctx, ops);
    if (!last || config.mode === "simple" || !this.refill) return alone();
    let call: Promise<SettleResult[]> | undefined;
    /** The settles' answer is `call`'s; the lease's items, or its error, its own. */
    const ride = <T>(both: Promise<{ results: SettleResult[]; leased: T | Error }>): Promise<T> => {
      call = both.then((r) => r.results);
      return both.then((r) => {
        if (r.leased instanceof Error) throw r.leased;
        return r.leased;
      });
    };
    const wrongKind = (kind: string) => Promise.reject(new Error(`a ${kind} lease cannot ride a ${config.mode} queue's settles`));
    this.refill(config, ops, {
      list: (lease) => (stream ? wrongKind("list") : ride(settleAndLease(this.client, keys, ctx, ops, lease))),
      // An entry a retry here hands back at once is reclaimable when the lease runs: scanning from the start finds it first.
      stream: (lease) => (!stream ? wrongKind("stream") : ride(settleStreamAndLease(this.client, keys, ctx, ops,
        ops.some((op) => op.action === "retry") ? { ...lease, cursor: "0-0" } : lease))),
    });
    return call ?? alone();
  }

  /** Sends one batch in script calls of at most CHUNK settles (pipelined); a waiter fails if a call its ops were in failed. */
  private async apply(batch: Pending): Promise<void> {
    const { config, ops } = batch;
    const ctx = {
      now: this.clock.now(),
      maxDeliveries: config.maxDeliveries,
      retryPolicy: policyArg(config.retryPolicy),
      publishTtlMs: config.publishTtlMs,
      minIdleMs: config.minIdleMs,
    };
    const keys = keysOf(config);
    const calls: Promise<SettleResult[]>[] = [];
    for (let i = 0; i < ops.length; i += CHUNK) {
      const chunk = ops.slice(i, i + CHUNK);
      const last = i + CHUNK >= ops.length;
      calls.push(
        this.send(config, keys, ctx, chunk, last).then((results) => {
          count(this.metrics, config.name, chunk, results);
          return results;
        }),
      );
    }
    const outcomes = await Promise.allSettled(calls);
    for (const w of batch.waiters) {
      const first = Math.floor(w.from / CHUNK);
      const last = Math.floor((w.from + Math.max(w.count, 1) - 1) / CHUNK);
      const failed = outcomes.slice(first, last + 1).find((o) => o.status === "rejected");
      if (failed) {
        w.reject(failed.reason);
        continue;
      }
      const results: SettleResult[] = [];
      for (let i = w.from; i < w.from + w.count; i++) {
        const o = outcomes[Math.floor(i / CHUNK)] as PromiseFulfilledResult<SettleResult[]>;
        results.push(o.value[i % CHUNK]);
      }
      w.resolve(results);
    }
  }
}
