/**
 * Orders and coalesces the pushes onto each queue. A queue has at most one
 * push (LPUSH, or push.lua with a TTL) in flight from this instance; the
 * pushes that arrive meanwhile wait and go together in the next one. With 100
 * single-item Enqueue calls in flight, one command carries all of a round
 * trip's arrivals, sparing Redis and ioredis a round of work per call (issue
 * #4, bench row 2); a push onto an idle queue is written at once, with no wait
 * (row 5, latency).
 *
 * One push in flight is also what keeps a queue in arrival order. Two pushes
 * in flight at once can land in either order: ioredis' Cluster client sends a
 * command again after a MOVED, TRYAGAIN or CLUSTERDOWN reply or a lost
 * connection, while the pushes sent after it go through.
 *
 * Invariants: pushes onto a queue are written in the order push() was called,
 * the next only after the last has settled; each caller's values stay together
 * and in its order (LPUSH of the concatenation); a batch never holds more than
 * `maxItems` values, so it is never larger than one Enqueue may be; every
 * caller of a batch gets its outcome. Calls are validated before they get
 * here, so a refused call never joins a batch; what can still fail is the push
 * itself (the key is not a list, Redis is gone), and that would have failed
 * each of the calls alone too.
 */
import type { BulkStrings } from "../redis/bulk-strings.js";

/** Writes `values` (oldest first) onto `queue`, resetting its expiry when `ttlMs` > 0. */
export type Push = (queue: string, ttlMs: number, values: BulkStrings[]) => Promise<unknown>;

interface Batch {
  /** Each caller's values, in call order. */
  values: BulkStrings[];
  count: number;
  /** The last non-zero ttl among the batch's calls: the expiry their pushes one by one would leave. */
  ttlMs: number;
  settle: { ok: (result: unknown) => void; fail: (err: unknown) => void }[];
  /** A write of its own (see alone()) that nothing joins, instead of pushing `values`. */
  run?: () => Promise<unknown>;
}

export class PushBatcher {
  /** Per queue with a push in flight: the batches waiting behind it, oldest first. */
  private readonly waiting = new Map<string, Batch[]>();

  constructor(
    private readonly write: Push,
    private readonly maxItems: number,
  ) {}

  /** Pushes `values` onto `queue` after the pushes to it before; resolves once they are written. */
  push(queue: string, ttlMs: number, values: BulkStrings): Promise<void> {
    const last = this.waiting.get(queue)?.at(-1);
    const batch = last && !last.run && last.count + values.count <= this.maxItems ? last : this.batch();
    batch.values.push(values);
    batch.count += values.count;
    if (ttlMs > 0) batch.ttlMs = ttlMs;
    const done = this.outcome(batch);
    if (batch !== last) this.schedule(queue, batch);
    return done.then(() => undefined);
  }

  /**
   * Runs `run`, a write onto `queue` that must not be merged with others (a
   * push that waits for replicas), in the queue's order: after the pushes
   * called before it, before those called after.
   */
  alone<T>(queue: string, run: () => Promise<T>): Promise<T> {
    const batch: Batch = { ...this.batch(), run };
    const done = this.outcome(batch) as Promise<T>;
    this.schedule(queue, batch);
    return done;
  }

  /** Writes `batch` now if `queue` has no write in flight, or else after the batches waiting. */
  private schedule(queue: string, batch: Batch): void {
    const batches = this.waiting.get(queue);
    if (batches) batches.push(batch);
    else {
      this.waiting.set(queue, []);
      this.send(queue, batch);
    }
  }

  private batch(): Batch {
    return { values: [], count: 0, ttlMs: 0, settle: [] };
  }

  private outcome(batch: Batch): Promise<unknown> {
    return new Promise((ok, fail) => batch.settle.push({ ok, fail }));
  }

  /** Writes `batch`, then the next batch waiting for `queue`, if any. */
  private send(queue: string, batch: Batch): void {
    const next = () => {
      const batches = this.waiting.get(queue)!;
      const following = batches.shift();
      if (following) this.send(queue, following);
      else this.waiting.delete(queue);
    };
    let written: Promise<unknown>;
    try {
      written = batch.run ? batch.run() : this.write(queue, batch.ttlMs, batch.values);
    } catch (err) {
      written = Promise.reject(err); // a throw must not leave the queue's later pushes waiting forever
    }
    written.then(
      (result) => {
        next();
        batch.settle.forEach((s) => s.ok(result));
      },
      (err: unknown) => {
        next();
        batch.settle.forEach((s) => s.fail(err));
      },
    );
  }
}
