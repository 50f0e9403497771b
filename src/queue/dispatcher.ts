/**
 * Serves every lease stream of one queue on this instance (SPEC Q8, Q13).
 *
 * One pump per queue: while the streams have open credit, it takes up to that
 * many items in one call (lease.lua for reliable queues, RPOP count for simple
 * ones) and shares them out. When the queue is empty it waits on one blocking
 * connection with `BLMOVE queue queue RIGHT RIGHT`: a move onto the same end of
 * the same list, which changes nothing and returns as soon as the list has an
 * item. Waking up moves nothing, so a wake-up lost to a closed connection or an
 * instance crash loses no item, and the move itself stays one atomic script.
 *
 * Invariants: the pump never asks for more items than the streams' open credit
 * (nothing popped that no worker can take); an item taken for a stream that
 * closed meanwhile goes straight back to the front of the queue.
 */
import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";
import type { RedisClient, RedisConnection } from "../redis/connection.js";
import { leaseItems } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { decodeItem } from "./envelope.js";
import type { Delivery, LeaseStream } from "./lease-stream.js";
import type { Settler } from "./settler.js";
import { tokenFormatter, type LeaseRef } from "./token.js";

/** Tuning for dispatchers. */
export interface DispatchOptions {
  /** Most items moved by one call. */
  leaseBatch: number;
  /** Seconds one blocking wait lasts before the pump looks at its credit again. */
  blockTimeoutSec: number;
}

interface Taken {
  ref: LeaseRef;
  value: Buffer;
  deliveries: number;
}

export class QueueDispatcher {
  private readonly streams: LeaseStream[] = [];
  private next = 0;
  private pumping = false;
  private closed = false;
  private blocker?: RedisClient;
  /** The pending blocking wake-up, if any. */
  private blocking?: Promise<void>;
  /** Ends the pump's wait for items early. */
  private wake?: () => void;
  private readonly token: (fence: number, sha: string) => string;

  constructor(
    readonly config: QueueConfig,
    private readonly redis: RedisConnection,
    private readonly clock: Clock,
    private readonly settler: Settler,
    private readonly options: DispatchOptions,
    private readonly log: Logger,
    /** Told of the tokens each stream was sent (they are in its `held` already). */
    private readonly onHold: (tokens: string[], stream: LeaseStream) => void,
  ) {
    this.token = tokenFormatter(config.name);
  }

  get streamCount(): number {
    return this.streams.length;
  }

  add(stream: LeaseStream): void {
    this.streams.push(stream);
    this.kick();
  }

  remove(stream: LeaseStream): void {
    const i = this.streams.indexOf(stream);
    if (i >= 0) this.streams.splice(i, 1);
  }

  /** Starts the pump if it is idle; call whenever credit opens. */
  kick(): void {
    if (!this.pumping && !this.closed) void this.pump();
  }

  /** Stops the pump and drops the blocking connection (a pending wake-up holds no item). */
  close(): void {
    this.closed = true;
    this.blocker?.disconnect();
    this.blocker = undefined;
  }

  private freeCredit(): number {
    let free = 0;
    for (const s of this.streams) free += s.free();
    return free;
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      let failures = 0;
      while (!this.closed) {
        const want = Math.min(this.freeCredit(), this.options.leaseBatch);
        if (want <= 0) break;
        try {
          const taken = await this.take(want);
          failures = 0;
          if (taken.length > 0) this.distribute(taken);
          // Fewer than asked for: the queue was empty after them, so wait rather than ask again
          // (at a trickle that saves a lease call per item; an item pushed meanwhile still wakes it).
          if (taken.length < want) await this.waitForItems();
        } catch (err) {
          if (this.closed) break;
          failures++;
          this.log.warn("lease pump failed; retrying", { queue: this.config.name, err });
          await new Promise((r) => setTimeout(r, Math.min(50 * 2 ** failures, 1000)));
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  private async take(max: number): Promise<Taken[]> {
    const { config } = this;
    const keys = keysOf(config);
    if (config.mode === "reliable") {
      const items = await leaseItems(this.redis.client, keys, this.clock.now(), max, config.recoveryTtlMs);
      return items.map((it) => ({
        ref: { queue: config.name, fence: it.fence, sha: it.sha },
        value: it.value,
        deliveries: it.deliveries,
      }));
    }
    const values = await this.redis.client.rpopBuffer(config.name, max);
    if (!values || values.length === 0) return [];
    const last = await this.redis.client.incrby(keys.fence, values.length);
    const first = last - values.length + 1;
    return values.map((value, i) => ({ ref: { queue: config.name, fence: first + i, sha: "" }, value, deliveries: 1 }));
  }

  /**
   * Waits until the blocking wake-up returns, or until this instance pushes to
   * the queue (see `pushed`). A wait cut short leaves its BLMOVE pending, and
   * the next wait waits on that one: still one blocking read per queue.
   */
  private async waitForItems(): Promise<void> {
    this.blocker ??= await this.redis.duplicate();
    if (!this.blocking) {
      const move = this.blocker.blmoveBuffer(this.config.name, this.config.name, "RIGHT", "RIGHT", this.options.blockTimeoutSec);
      this.blocking = move.then(() => undefined).finally(() => (this.blocking = undefined));
      this.blocking.catch(() => undefined); // a wake-up nobody waits for any more may fail unseen (the connection closed)
    }
    const blocking = this.blocking;
    await new Promise<void>((resolve, reject) => {
      this.wake = resolve;
      blocking.then(resolve, reject);
    });
    this.wake = undefined;
  }

  /**
   * This instance has just sent a push to the queue, on the command connection.
   * If the pump waits for items, it leases now: its lease script goes out on
   * the same connection behind the push, so Redis runs it right after, a round
   * trip sooner than the blocking wake-up would have let it. Other instances
   * still learn of the items from their own wake-ups.
   */
  pushed(): void {
    this.wake?.();
  }

  private distribute(taken: Taken[]): void {
    let i = 0;
    const n = this.streams.length;
    for (let visited = 0; visited < n && i < taken.length; visited++) {
      const stream = this.streams[(this.next + visited) % n];
      const room = stream.free();
      if (room === 0) continue;
      const batch: Delivery[] = [];
      const tokens: string[] = [];
      for (const end = Math.min(taken.length, i + room); i < end; i++) {
        const t = taken[i];
        const token = this.token(t.ref.fence, t.ref.sha);
        stream.held.set(token, t.ref);
        tokens.push(token);
        batch.push({ token, fence: t.ref.fence, deliveryCount: t.deliveries, queue: this.config.name, item: decodeItem(t.value) });
      }
      this.onHold(tokens, stream);
      stream.lastSendMs = this.clock.now();
      stream.sink.deliver(batch);
    }
    this.next = n === 0 ? 0 : (this.next + 1) % n;
    if (i < taken.length) void this.giveBack(taken.slice(i));
  }

  /** Returns items that no stream could take to the front of the queue, uncounted and in their order. */
  private async giveBack(taken: Taken[]): Promise<void> {
    try {
      if (this.config.mode === "simple") {
        await this.redis.client.rpush(this.config.name, ...taken.map((t) => t.value).reverse());
      } else {
        const lastFirst = [...taken].reverse();
        await this.settler.settleMany(this.config, lastFirst.map((t) => ({ action: "u", sha: t.ref.sha, fence: t.ref.fence })));
      }
    } catch (err) {
      this.log.error("could not return undeliverable items; the watchdog will recover them", { queue: this.config.name, err });
    }
  }
}
