/**
 * Coalesces settles: every ack, retry, drop or extend that arrives in one turn
 * of the event loop, from streams or unary calls, goes to Redis as one
 * settle.lua call per queue.
 */
import type { Clock } from "../clock.js";
import { noMetrics, type ItemEvent, type Metrics } from "../metrics/hooks.js";
import type { RedisClient } from "../redis/connection.js";
import { settleItems, type SettleAction, type SettleOp } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";

interface Pending {
  config: QueueConfig;
  ops: SettleOp[];
  waiters: { resolve: (code: number) => void; reject: (err: unknown) => void }[];
}

/** The most settles sent in one script call. */
const CHUNK = 1000;

/** What a settle that applied (code 1) did to its item; undo, extend and check move nothing worth counting. */
const applied: Partial<Record<SettleAction, ItemEvent>> = { a: "acked", d: "dropped", r: "retried", b: "returned" };

/** Counts the settles of one script call that changed an item. */
function count(metrics: Metrics, queue: string, ops: readonly SettleOp[], codes: readonly number[]): void {
  const counts = new Map<ItemEvent, number>();
  ops.forEach((op, i) => {
    const event = codes[i] === 2 ? "dead_lettered" : codes[i] === 1 ? applied[op.action] : undefined;
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
  ) {}

  /** Applies `op` with the next batch; resolves to settle.lua's code for it. */
  settle(config: QueueConfig, op: SettleOp): Promise<number> {
    let batch = this.pending.get(config.name);
    if (!batch) {
      batch = { config, ops: [], waiters: [] };
      this.pending.set(config.name, batch);
    }
    batch.ops.push(op);
    const result = new Promise<number>((resolve, reject) => batch.waiters.push({ resolve, reject }));
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
    return result;
  }

  private flush(): void {
    this.scheduled = false;
    const batches = [...this.pending.values()];
    this.pending.clear();
    for (const batch of batches) {
      for (let i = 0; i < batch.ops.length; i += CHUNK) {
        const waiters = batch.waiters.slice(i, i + CHUNK);
        const ops = batch.ops.slice(i, i + CHUNK);
        settleItems(this.client, keysOf(batch.config), this.clock.now(), batch.config.maxDeliveries, ops)
          .then(
            (codes) => {
              count(this.metrics, batch.config.name, ops, codes);
              waiters.forEach((w, j) => w.resolve(codes[j]));
            },
            (err: unknown) => waiters.forEach((w) => w.reject(err)),
          );
      }
    }
  }
}
