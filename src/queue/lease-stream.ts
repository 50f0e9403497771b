/**
 * One worker's lease stream, as the dispatcher sees it: a credit (max in
 * flight), the deliveries it holds, and where to send things. It knows nothing
 * of gRPC: the transport gives it a sink.
 */
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
}

/** Where a stream's output goes. */
export interface LeaseSink {
  /** Sends a batch of deliveries. */
  deliver(deliveries: Delivery[]): void;
  /** Sends a keep-alive on an idle stream. */
  heartbeat(nowMs: number): void;
  /** Ends the stream with an error (its queue was deleted). */
  fail(err: Error): void;
  /** Tells the worker the server is shutting down: settle what you hold within `graceMs`. */
  drain(graceMs: number): void;
  /** Ends the stream normally (after a drain). */
  end(): void;
}

export class LeaseStream {
  /** Token → delivery, for every item this stream holds and has not settled. */
  readonly held = new Map<string, LeaseRef>();
  closed = false;
  lastSendMs: number;

  constructor(
    readonly config: QueueConfig,
    public credit: number,
    readonly sink: LeaseSink,
    nowMs: number,
  ) {
    this.lastSendMs = nowMs;
  }

  get queue(): string {
    return this.config.name;
  }

  /** How many more items this stream may take now. */
  free(): number {
    return this.closed ? 0 : Math.max(0, this.credit - this.held.size);
  }
}
