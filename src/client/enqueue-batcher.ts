/**
 * Client-side enqueue coalescing: `enqueue()` calls to the same queue (with
 * the same ttl and no replica wait) made in the same event-loop turn go out
 * as one Enqueue RPC, the way ioredis pipelines commands. One gRPC call costs
 * far more than an item (issue #4, bench row 2), so 100 single-item enqueues
 * in flight cost about one call per turn instead of 100.
 *
 * A call to a queue with nothing open or in flight goes out at once, so an
 * idle producer pays no wait for the turn to end (bench row 5, latency), nor
 * does a serial one whose last call was answered (the deployed serial row);
 * calls made in answer to a finished merged call (a pool keeping 100 in
 * flight: its callers all go on in one turn) are gathered, as are calls made
 * while one is out.
 *
 * Each caller still gets exactly its own ids, in its order. A merged call the
 * server refuses for its content (INVALID_ARGUMENT, RESOURCE_EXHAUSTED) wrote
 * nothing, so its calls are sent again one by one and only the faulty one
 * fails, with its own status. Any other failure (UNAVAILABLE, a deadline,
 * NOT_FOUND or PERMISSION_DENIED for the queue) is every caller's: it is not
 * retried, since the items may have been written.
 */
import * as grpc from "@grpc/grpc-js";
import type { EnqueueItem } from "../gen/switchyard/v1/queue_pb.js";

/** Sends one Enqueue RPC; resolves to the ids. */
export type SendEnqueue = (queue: string, items: EnqueueItem[], ttlMs: number) => Promise<string[]>;

/** At most this many items, and about this many payload bytes, per merged call. */
const MAX_ITEMS = 1000;
const MAX_BYTES = 1 << 20;

interface Caller {
  items: EnqueueItem[];
  ok(ids: string[]): void;
  fail(err: unknown): void;
}

interface Batch {
  queue: string;
  ttlMs: number;
  callers: Caller[];
  items: number;
  bytes: number;
}

const contentErrors = new Set<number>([grpc.status.INVALID_ARGUMENT, grpc.status.RESOURCE_EXHAUSTED]);

export class EnqueueBatcher {
  private readonly open = new Map<string, Batch>();
  /** RPCs in flight per queue and ttl. */
  private readonly busy = new Map<string, number>();
  /** Keys whose merged RPC (of more than one call) finished in this turn. */
  private readonly justDone = new Set<string>();

  constructor(private readonly send: SendEnqueue) {}

  /** Enqueues `items` with the other calls to `queue` in this turn; resolves to this call's ids. */
  enqueue(queue: string, items: EnqueueItem[], ttlMs: number): Promise<string[]> {
    const bytes = items.reduce((n, i) => n + i.payload.byteLength, 0);
    if (items.length >= MAX_ITEMS || bytes >= MAX_BYTES) return this.send(queue, items, ttlMs);
    const key = `${ttlMs}\u0000${queue}`;
    let batch = this.open.get(key);
    if (!batch && !this.busy.get(key) && !this.justDone.has(key)) return this.track(key, this.send(queue, items, ttlMs));
    if (batch && (batch.items + items.length > MAX_ITEMS || batch.bytes + bytes > MAX_BYTES)) {
      this.flush(key, batch);
      batch = undefined;
    }
    if (!batch) {
      const fresh: Batch = { queue, ttlMs, callers: [], items: 0, bytes: 0 };
      this.open.set(key, fresh);
      setImmediate(() => this.flush(key, fresh));
      batch = fresh;
    }
    batch.items += items.length;
    batch.bytes += bytes;
    const open = batch;
    return new Promise((ok, fail) => open.callers.push({ items, ok, fail }));
  }

  /**
   * Counts `call` as in flight for `key` until it settles. The answer of a
   * call that carried `callers` > 1 calls marks the key for the rest of the
   * turn: its callers go on in this turn, and their next calls are gathered.
   */
  private track<T>(key: string, call: Promise<T>, callers = 1): Promise<T> {
    this.busy.set(key, (this.busy.get(key) ?? 0) + 1);
    const idle = () => {
      const n = (this.busy.get(key) ?? 1) - 1;
      if (n > 0) this.busy.set(key, n);
      else this.busy.delete(key);
      if (callers > 1 && !this.justDone.has(key)) {
        this.justDone.add(key);
        setImmediate(() => this.justDone.delete(key));
      }
    };
    call.then(idle, idle);
    return call;
  }

  private flush(key: string, batch: Batch): void {
    if (this.open.get(key) !== batch) return;
    this.open.delete(key);
    const { queue, ttlMs, callers } = batch;
    if (callers.length === 1) {
      this.track(key, this.send(queue, callers[0].items, ttlMs)).then(callers[0].ok, callers[0].fail);
      return;
    }
    this.track(key, this.send(queue, callers.flatMap((c) => c.items), ttlMs), callers.length).then(
      (ids) => {
        let at = 0;
        for (const c of callers) {
          c.ok(ids.slice(at, at + c.items.length));
          at += c.items.length;
        }
      },
      (err: grpc.ServiceError) => {
        if (!contentErrors.has(err.code)) return callers.forEach((c) => c.fail(err));
        // Nothing was written: each call alone, so only the faulty one fails.
        for (const c of callers) this.send(queue, c.items, ttlMs).then(c.ok, c.fail);
      },
    );
  }
}
