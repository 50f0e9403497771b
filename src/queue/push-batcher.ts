/**
 * Coalesces the pushes onto one queue that arrive in the same event-loop turn
 * into one push (LPUSH, or push.lua with a TTL). With 100 single-item
 * Enqueue calls in flight, many reach the server in one socket read; one
 * command for all of them spares Redis and ioredis a round of work per call
 * (issue #4, bench row 2).
 *
 * A push onto a queue with nothing open or in flight is written at once: an
 * idle queue pays no wait for a turn to end (issue #4, bench row 5, latency);
 * pushes that arrive while one is out are gathered and sent together.
 *
 * Invariants: each caller's values stay together and in its order (LPUSH of
 * the concatenation); a batch never holds more than `maxItems` values, so it
 * is never larger than one Enqueue may be; every caller of a batch gets its
 * outcome. Calls are validated before they get here, so a refused call never
 * joins a batch; what can still fail is the push itself (the key is not a list,
 * Redis is gone), and that would have failed each of the calls alone too.
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
  settle: { ok: () => void; fail: (err: unknown) => void }[];
  sent: boolean;
}

export class PushBatcher {
  /** The open batch of each queue, sent at the end of the turn (setImmediate). */
  private readonly open = new Map<string, Batch>();
  /** Writes in flight per queue. */
  private readonly busy = new Map<string, number>();

  constructor(
    private readonly write: Push,
    private readonly maxItems: number,
  ) {}

  /** Pushes `values` onto `queue` with the other pushes to it in this turn; resolves once they are written. */
  push(queue: string, ttlMs: number, values: BulkStrings): Promise<void> {
    let batch = this.open.get(queue);
    if (batch && batch.count + values.count > this.maxItems) {
      this.send(queue, batch);
      batch = undefined;
    }
    if (!batch && !this.busy.get(queue)) {
      const alone: Batch = { values: [values], count: values.count, ttlMs, settle: [], sent: false };
      const done = new Promise<void>((ok, fail) => alone.settle.push({ ok, fail }));
      this.send(queue, alone);
      return done;
    }
    if (!batch) {
      const fresh: Batch = { values: [], count: 0, ttlMs: 0, settle: [], sent: false };
      this.open.set(queue, fresh);
      setImmediate(() => this.send(queue, fresh));
      batch = fresh;
    }
    batch.values.push(values);
    batch.count += values.count;
    if (ttlMs > 0) batch.ttlMs = ttlMs;
    const open = batch;
    return new Promise((ok, fail) => open.settle.push({ ok, fail }));
  }

  private send(queue: string, batch: Batch): void {
    if (batch.sent) return;
    batch.sent = true;
    if (this.open.get(queue) === batch) this.open.delete(queue);
    this.busy.set(queue, (this.busy.get(queue) ?? 0) + 1);
    const idle = () => {
      const n = (this.busy.get(queue) ?? 1) - 1;
      if (n > 0) this.busy.set(queue, n);
      else this.busy.delete(queue);
    };
    this.write(queue, batch.ttlMs, batch.values).then(
      () => {
        idle();
        batch.settle.forEach((s) => s.ok());
      },
      (err: unknown) => {
        idle();
        batch.settle.forEach((s) => s.fail(err));
      },
    );
  }
}
