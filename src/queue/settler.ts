/**
 * Coalesces settles: every ack, retry, drop or extend that arrives in one turn
 * of the event loop, from streams or unary calls, goes to Redis as one
 * settle.lua call per queue.
 */
import type { Clock } from "../clock.js";
import type { RedisClient } from "../redis/connection.js";
import { settleItems, type SettleOp } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";

interface Pending {
  config: QueueConfig;
  ops: SettleOp[];
  waiters: { resolve: (code: number) => void; reject: (err: unknown) => void }[];
}

/** The most settles sent in one script call. */
const CHUNK = 1000;

export class Settler {
  private pending = new Map<string, Pending>();
  private scheduled = false;

  constructor(
    private readonly client: RedisClient,
    private readonly clock: Clock,
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
        settleItems(this.client, keysOf(batch.config), this.clock.now(), batch.config.maxDeliveries, batch.ops.slice(i, i + CHUNK))
          .then(
            (codes) => waiters.forEach((w, j) => w.resolve(codes[j])),
            (err: unknown) => waiters.forEach((w) => w.reject(err)),
          );
      }
    }
  }
}
