/**
 * One worker's lease stream, as the dispatcher sees it: a credit (max in
 * flight), the deliveries it holds, and where to send things. It knows nothing
 * of gRPC: the transport gives it a sink.
 */
import type { Timer } from "../clock.js";
import type { QueueConfig } from "./declaration.js";
import type { Item } from "./envelope.js";
import type { LeaseRef } from "./token.js";

/** One leased item on its way to a worker. */
export interface Delivery {
  token: string;
  fence: number;
  deliveryCount: number;
  queue: string;
  item: Item;
  /** Why the previous delivery failed ("" on a first delivery). */
  lastError: string;
}

/** Where a stream's output goes. */
export interface LeaseSink {
  /**
   * Sends a batch of deliveries, in as many messages as the worker's message
   * size limit needs; false when the stream can no longer write (the items
   * must go back). A delivery that alone is larger than the worker accepts is
   * not sent: `undeliverable` is told why, and the item is dead-lettered.
   */
  deliver(deliveries: Delivery[], undeliverable?: (delivery: Delivery, reason: string) => void): boolean;
  /** Sends a keep-alive on an idle stream. */
  heartbeat(nowMs: number): void;
  /** Ends the stream with an error (its queue was deleted). */
  fail(err: Error): void;
  /** Tells the worker the server is shutting down: settle what you hold within `graceMs`. */
  drain(graceMs: number): void;
  /** Ends the stream normally (after a drain). */
  end(): void;
  /**
   * True while the transport holds more of this stream's deliveries than it
   * may (a worker not reading): the stream takes nothing more meanwhile, and
   * the transport calls Queues.resume once it drained.
   */
  backlogged?(): boolean;
}

export class LeaseStream {
  /** Token → delivery, for every item this stream holds and has not settled. */
  readonly held = new Map<string, LeaseRef>();
  /**
   * Token → delivery, for reliable and stream items whose settle (ack, retry, drop) is on
   * its way to Redis: they no longer count against the credit, so the next lease
   * goes out with the settle, not a round trip after it (see Queues.settling).
   */
  readonly settling = new Map<string, LeaseRef>();
  closed = false;
  lastSendMs: number;
  /** The next heartbeat; cancelled when the stream closes, so a closed stream is not kept until it fires. */
  heartbeat?: Timer;
  /** The queue's min_idle when the stream opened: what its worker was told (LeaseOpened.min_idle) and extends by. */
  readonly announcedMinIdleMs: number;
  /**
   * While the queue's min_idle is below the announced one (UpdateQueue lowered it):
   * token → when its claim last started by the worker's doing (delivery or extend).
   * The instance extends each such claim until the announced min_idle has passed
   * since then, as the worker would expect (see Queues.keepAnnouncedMinIdle).
   */
  claimedMs?: Map<string, number>;

  constructor(
    /** The queue's current declaration (replaced when it changes). */
    public config: QueueConfig,
    public credit: number,
    readonly sink: LeaseSink,
    nowMs: number,
    /** Stream queues: the consumer group the stream reads as ("" for lists). */
    readonly group = "",
  ) {
    this.lastSendMs = nowMs;
    this.announcedMinIdleMs = config.minIdleMs;
  }

  get queue(): string {
    return this.config.name;
  }

  /** How many more items this stream may take now. */
  free(): number {
    if (this.closed || this.sink.backlogged?.()) return 0;
    return Math.max(0, this.credit - this.held.size);
  }
}
