/**
 * Serves every lease stream of one queue on this instance (SPEC Q8, Q13).
 *
 * One pump per queue: while the streams have open credit (and the queue is not
 * paused), it takes up to that many items in one call (lease.lua for reliable
 * queues, pop.lua for simple ones) and shares them out. Up to
 * LEASE_CALLS_IN_FLIGHT calls run at once, each for credit the calls before it
 * have not asked for: credit freed by an ack is asked for at once, not a round
 * trip later, once the call in flight has answered. That is while the queue
 * has a backlog (the last answer was full); otherwise one call goes at a time,
 * since at a trickle the calls beside it would find nothing. When the queue is empty
 * it waits on one blocking connection with `BLMOVE queue queue RIGHT RIGHT`: a
 * move onto the same end of the same list, which changes nothing and returns as
 * soon as the list has an item. Waking up moves nothing, so a wake-up lost to a
 * closed connection or an instance crash loses no item.
 *
 * Invariants: the pump never asks for more items than the streams' open credit
 * less what the calls in flight asked for (nothing popped that no worker can take); the items of the
 * calls in flight, whatever their kind, are shared out in the order Redis leased them (fence order); an item taken for a stream that
 * cannot take it goes back to the front of the queue, uncounted, before the pump leases again. A lease call
 * whose answer is lost (a cut connection, a timeout) may still have run: before
 * its next lease the pump waits until no call is in flight (their answers give
 * their items holders) and gives back, uncounted, every delivery of this instance
 * that no stream holds (`reconcile`), so none stays in processing without a holder.
 */
import { ReplyError } from "ioredis";
import type { Clock } from "../clock.js";
import { SwitchyardError } from "../errors.js";
import type { Logger } from "../log.js";
import type { RedisClient, RedisConnection } from "../redis/connection.js";
import type { BulkStrings } from "../redis/bulk-strings.js";
import { leaseItems, popItems, pushAndLease, pushItems, type LeasedItem } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { decodeItem, type StoredItem } from "./envelope.js";
import type { Delivery, LeaseStream } from "./lease-stream.js";
import { deliveryField, tokenFormatter, type LeaseRef } from "./token.js";
import type { LeaseBeside } from "./settler.js";

/** Most lease calls one pump has in flight (on the one command connection, so Redis runs and answers them in order). */
export const LEASE_CALLS_IN_FLIGHT = 4;

/**
 * Resolves once the event loop's check phase has run. Node's http2 writes a
 * session's pending frames there, as a native immediate, which runs before
 * the callbacks of setImmediate: a caller that awaits this after handing
 * deliveries to their streams lets their bytes leave before its own work goes
 * on, rather than after it (a paced item reaches its worker sooner by the
 * Enqueue's answer, which is not on its way).
 */
function afterTransportWrites(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Tuning for dispatchers. */
export interface DispatchOptions {
  /** Most items moved by one call. */
  leaseBatch: number;
  /** Seconds one blocking wait lasts before the pump looks at its credit again. */
  blockTimeoutSec: number;
}

/** What a dispatcher needs of the rest of the queue capability. */
export interface DispatchHost {
  readonly redis: RedisConnection;
  readonly clock: Clock;
  readonly log: Logger;
  readonly options: DispatchOptions;
  /** This instance's id, the owner of its deliveries. */
  readonly owner: string;
  /** Told of the tokens each stream was sent (they are in its `held` already). */
  onHold(tokens: string[], stream: LeaseStream): void;
  /**
   * Gives deliveries that reached no worker back to the front of the queue, uncounted, in this order;
   * resolves once its first attempt has answered, taken or not.
   */
  giveBack(config: QueueConfig, refs: LeaseRef[]): Promise<unknown>;
  /** Dead-letters a delivery that reached no worker, with the reason (counted). */
  kill(config: QueueConfig, ref: LeaseRef, reason: string): void;
  /** Gives back (uncounted: they reached no worker) the deliveries of this instance on the queue that no stream holds. */
  reconcile(config: QueueConfig): Promise<void>;
  /** The queue's declaration as Redis holds it now (the cache and the listeners learn it too); NOT_FOUND if deleted. */
  current(name: string): Promise<QueueConfig>;
}

/** An item taken for the streams: its stored value, or (stream queues) the item read already. */
export interface Taken {
  ref: LeaseRef;
  value?: Buffer;
  item?: StoredItem;
}

/** A lease call in flight: what it asked for and, once it came, its answer. */
interface Answer {
  want: number;
  /** `pushes` when it was sent. */
  pushes: number;
  taken?: Taken[];
  failure?: { err: unknown };
  /** Resolves the call's lease() once its answer is shared out, with how many items it took. */
  shared: (taken: number) => void;
}

export class QueueDispatcher {
  private readonly streams: LeaseStream[] = [];
  private next = 0;
  private pumping = false;
  private closed = false;
  /** A lease call failed with its outcome unknown: reconcile before the next. */
  private unsure = false;
  /** A reconcile is running: no lease may be sent until it ends (it would take the new deliveries for nobody's). */
  private reconciling = false;
  /**
   * Give-backs of deliveries no stream took that have not answered yet: no lease goes out
   * meanwhile, or it could take items behind them before they are back at the front.
   */
  private givingBack = 0;
  /** A push that carried a lease was refused as its cluster slot migrated: pushes go alone until a lease call answers. */
  private slotMoving = false;
  /** Lease calls sent and not answered yet, and the credit they asked for. */
  private inFlight = 0;
  /** The lease calls in flight, in the order they were sent (see lease()). */
  private readonly answers: Answer[] = [];
  private asked = 0;
  /** The last answer had fewer items than asked for: the queue was empty after them. */
  private emptied = false;
  /** `pushes` when the lease that found the queue empty was sent: a push since then means there may be items. */
  private emptiedAt = 0;
  /** The last answer had fewer items than asked for (or none came yet): one lease call at a time. */
  private short = true;
  /** Pushes this instance has sent to the queue (see `pushed`): a lease sent before one may have missed its items. */
  private pushes = 0;
  /**
   * Items no stream took, in queue order, with the items of every answer after them
   * (taken behind them): given back together once no call is in flight, so the queue
   * gets them back in their order.
   */
  private refused: Taken[] = [];
  /** The first failure of a lease call since the pump last looked, and failures in a row. */
  private failed?: unknown;
  private failures = 0;
  /** Wakes the pump waiting for an answer or for credit. */
  private poke?: () => void;
  private blocker?: RedisClient;
  /** The pending blocking wake-up, if any. */
  private blocking?: Promise<void>;
  /** Ends the pump's wait for items early. */
  private wake?: () => void;
  private readonly token: (fence: number, owner: string) => string;

  constructor(
    /** The queue's current declaration (replaced when it changes). */
    public config: QueueConfig,
    protected readonly host: DispatchHost,
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

  /** Starts the pump if it is idle, or wakes it; call whenever credit opens or the queue resumes. */
  kick(): void {
    if (this.closed) return;
    if (!this.pumping) void this.pump();
    else this.wakePump();
  }

  private wakePump(): void {
    const poke = this.poke;
    this.poke = undefined;
    poke?.();
  }

  /** Ends a wait for items at once (the queue was paused or changed). */
  interrupt(): void {
    this.wake?.();
  }

  /** Stops the pump and drops the blocking connection (a pending wake-up holds no item). */
  close(): void {
    this.closed = true;
    this.wake?.();
    this.wakePump();
    this.blocker?.disconnect();
    this.blocker = undefined;
  }

  private freeCredit(): number {
    let free = 0;
    for (const s of this.streams) free += s.free();
    return free;
  }

  /** A lease call may have run without its answer reaching us (a reconnect): reconcile before leasing again. */
  markUnsure(): void {
    if (this.config.mode !== "reliable") return;
    this.unsure = true;
    this.kick();
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (!this.closed) {
        try {
          if (this.failed !== undefined || this.unsure) {
            // Reconcile sees only deliveries no call in flight will still hand to a stream.
            if (this.inFlight > 0) {
              await this.answer();
              continue;
            }
            const err = this.failed;
            this.failed = undefined;
            if (err !== undefined) throw err;
            this.unsure = false;
            this.reconciling = true;
            await this.host.reconcile(this.config).catch((e: unknown) => {
              this.unsure = true;
              throw e;
            }).finally(() => (this.reconciling = false));
          }
          if (this.config.paused) break;
          const want = Math.min(this.freeCredit() - this.asked, this.host.options.leaseBatch);
          if (want > 0 && !this.emptied && this.refused.length === 0 && this.givingBack === 0 && this.inFlight < this.callsAllowed()) {
            void this.lease(want);
            continue;
          }
          if (this.inFlight > 0 || this.givingBack > 0) await this.answer();
          else if (want <= 0) break;
          else {
            // Fewer than asked for: the queue was empty after them, so wait rather than ask again
            // (at a trickle that saves a lease call per item; an item pushed meanwhile still wakes it).
            this.emptied = false;
            await this.waitForItems();
          }
        } catch (err) {
          if (this.closed) break;
          this.failures++;
          this.host.log.warn("lease pump failed; retrying", { queue: this.config.name, err });
          await new Promise((r) => setTimeout(r, Math.min(50 * 2 ** this.failures, 1000)));
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /**
   * A lease to travel beside settles already going to Redis (settle-lease.lua or stream-settle-lease.lua,
   * see Settler): when the pump would lease now, it sends `send(lease)` as one of
   * its calls, for the credit no call has asked for, and takes its answer's
   * items as its own lease's. False when it would not (nothing is sent): a
   * call is in flight that must answer first, the queue was empty at the last
   * look (a push wakes the pump), or a failure waits to be reconciled.
   */
  leaseBeside(send: LeaseBeside): boolean {
    if (this.emptied || this.wake) return false;
    const want = this.wantNow();
    if (want === 0) return false;
    void this.lease(want, () => this.takeBeside(want, send));
    return true;
  }

  /**
   * Pushes `values` (oldest first) onto the queue, `ttlMs` > 0 resetting its
   * expiry. When the pump would lease now, the lease goes in the same call,
   * behind the push (push-lease.lua), and the answer's items are the pump's:
   * an item pushed onto an empty queue reaches a worker one round trip and
   * one Redis call sooner than by a lease sent after the push. Resolves to
   * the list's length once those items are shared out, so a push after it
   * finds the pump free to carry its own lease. Otherwise a plain push, and
   * the pump leases behind it (`pushed`).
   */
  push(ttlMs: number, values: BulkStrings[]): Promise<number> {
    const { host, config } = this;
    const want = config.mode === "reliable" && !this.slotMoving ? this.wantNow() : 0;
    if (want === 0) return this.pushAlone(ttlMs, values);
    const call = pushAndLease(host.redis.client, keysOf(config), ttlMs, values, {
      now: host.clock.now(), max: want, recoveryTtlMs: config.recoveryTtlMs, owner: host.owner,
    });
    // Counted as a push for the calls already in flight (sent before it, they may have missed its items),
    // not for its own lease, which runs after it.
    this.pushes++;
    const shared = this.lease(want, () => this.takePushed(call));
    this.wake?.();
    // Items it took went to their streams: their frames leave before the pusher's own work goes on (its answer).
    return shared.then((taken) => (taken > 0 ? afterTransportWrites() : undefined)).then(() => call).then(
      ({ length }) => length,
      (err: unknown) => {
        if (!movingSlot(err)) throw err;
        // Its keys are on two masters for now (a cluster slot migrating): Redis refuses a call on several of them
        // (TRYAGAIN) but serves a push onto the list alone. Pushes go alone until a lease call goes through again.
        this.slotMoving = true;
        return this.pushAlone(ttlMs, values);
      },
    );
  }

  /** A plain push, and the pump leases behind it (`pushed`). */
  private pushAlone(ttlMs: number, values: BulkStrings[]): Promise<number> {
    const pushed = pushItems(this.host.redis.client, this.config.name, ttlMs, values);
    this.pushed(); // after the push is sent, so the lease reaches Redis after it
    return pushed;
  }

  /**
   * How many items the pump would lease now, beside another call (0: none):
   * the credit no call has asked for, when a call may go (one at a time while
   * the queue has no backlog) and no failure waits to be reconciled.
   */
  private wantNow(): number {
    if (this.closed || this.config.paused || this.config.mode === "simple") return 0;
    if (this.failed !== undefined || this.unsure || this.reconciling || this.refused.length > 0 || this.givingBack > 0) return 0;
    if (this.inFlight >= this.callsAllowed()) return 0;
    return Math.max(0, Math.min(this.freeCredit() - this.asked, this.host.options.leaseBatch));
  }

  /** How many lease calls may be in flight: several only while the queue has a backlog. */
  private callsAllowed(): number {
    return this.short ? 1 : LEASE_CALLS_IN_FLIGHT;
  }

  /** take(), as a lease riding settles (see leaseBeside). */
  protected async takeBeside(max: number, send: LeaseBeside): Promise<Taken[]> {
    return this.taken(await send.list({ max, recoveryTtlMs: this.config.recoveryTtlMs, owner: this.host.owner }));
  }

  /** take(), as the lease behind a push (see push). */
  protected async takePushed(call: Promise<{ leased: LeasedItem[] | Error }>): Promise<Taken[]> {
    let leased: LeasedItem[] | Error;
    try {
      ({ leased } = await call);
    } catch (err) {
      // Refused by Redis, the call ran nothing (no push, no lease); cut or timed out, it may have run.
      if (err instanceof ReplyError || err instanceof SwitchyardError) return [];
      throw err;
    }
    if (leased instanceof Error) throw leased;
    return this.taken(leased);
  }

  /**
   * Sends one lease call for `want` items; its answer shares them out and wakes the pump. Resolves once it has, to how many items its answer took.
   * Answers are shared out in the order Redis ran their calls, which is the order of their fences: a lease
   * riding settles resolves a few promise steps later than a plain one, and a call sent again (EVAL after
   * NOSCRIPT) runs after calls sent behind it, so two answers read from Redis together could otherwise reach
   * the streams newest first. An answer waits for those of the calls sent before it (a call runs after every
   * call sent before it, or has answered before a call resent after it answers); the answers then at hand
   * are shared out in the order of their fences.
   */
  private lease(want: number, call = () => this.take(want)): Promise<number> {
    this.inFlight++;
    this.asked += want;
    return new Promise((shared) => {
      const answer: Answer = { want, pushes: this.pushes, shared };
      this.answers.push(answer);
      call().then(
        (taken) => (answer.taken = taken),
        (err: unknown) => (answer.failure = { err }),
      ).finally(() => this.takeAnswers());
    });
  }

  /** Takes up the answers that came, up to the first one still awaited of the calls sent before them. */
  private takeAnswers(): void {
    const ready: Answer[] = [];
    while (this.answers.length > 0 && (this.answers[0].taken || this.answers[0].failure)) ready.push(this.answers.shift()!);
    if (ready.length === 0) return;
    try {
      // One call's items have consecutive fences (a script runs whole): its first one places it.
      const leased: Taken[][] = [];
      for (const answer of ready) if (this.noted(answer) && answer.taken!.length > 0) leased.push(answer.taken!);
      if (leased.length > 1) leased.sort((a, b) => a[0].ref.fence - b[0].ref.fence);
      for (const taken of leased) {
        if (this.refused.length > 0) this.refused.push(...taken);
        else this.distribute(taken);
      }
    } catch (err) {
      // A failure to share them out may have left items for nobody.
      this.failedCall(err);
    } finally {
      for (const answer of ready) {
        this.inFlight--;
        this.asked -= answer.want;
        answer.shared(answer.taken?.length ?? 0);
      }
      if (this.inFlight === 0 && this.refused.length > 0) {
        const refused = this.refused;
        this.refused = [];
        this.giveBack(refused);
      }
      this.kick();
    }
  }

  /** Notes what an answer says of the queue; true if it came with items (a list, maybe empty), false if its call failed. */
  private noted({ want, pushes, taken, failure }: Answer): boolean {
    if (!taken) {
      this.failedCall(failure!.err);
      return false;
    }
    this.failures = 0;
    this.slotMoving = false;
    this.short = taken.length < want;
    // Short, the queue was empty behind it, unless a push went out after it: then lease again, not wait.
    this.emptied = this.short && this.pushes === pushes;
    if (this.emptied) this.emptiedAt = pushes;
    return true;
  }

  /** A lease call failed: its outcome is unknown, and it may have leased items for nobody. */
  private failedCall(err: unknown): void {
    if (this.config.mode === "reliable") this.unsure = true;
    this.failed ??= err;
  }

  /** Waits until a lease call answers or credit opens. */
  private answer(): Promise<void> {
    return new Promise((resolve) => (this.poke = resolve));
  }

  protected async take(max: number): Promise<Taken[]> {
    const { config, host } = this;
    const keys = keysOf(config);
    const { name } = config;
    if (config.mode === "reliable") {
      return this.taken(await leaseItems(host.redis.client, keys, {
        now: host.clock.now(), max, recoveryTtlMs: config.recoveryTtlMs, owner: host.owner,
      }));
    }
    const { first, values } = await popItems(host.redis.client, keys, max);
    const poppedMs = host.clock.now();
    return values.map((value, i) => ({ ref: { queue: name, fence: first + i, owner: "", popped: value, poppedMs }, value }));
  }

  /** A reliable queue's leased items as this instance's deliveries. */
  private taken(items: LeasedItem[]): Taken[] {
    const { name } = this.config;
    const owner = this.host.owner;
    return items.map((it) => ({ ref: { queue: name, fence: it.fence, owner }, value: it.value }));
  }

  /**
   * Waits until the blocking wake-up returns, or until this instance pushes to
   * the queue (see `pushed`). A wait cut short leaves its BLMOVE pending, and
   * the next wait waits on that one: still one blocking read per queue.
   */
  private async waitForItems(): Promise<void> {
    if (!this.blocker) {
      const blocker = await this.host.redis.duplicate();
      // Closed while the connection was being made: nobody will disconnect it but us.
      if (this.closed) {
        blocker.disconnect();
        return;
      }
      this.blocker = blocker;
    }
    if (!this.blocking) {
      const move = this.wakeUp(this.blocker);
      this.blocking = move.then(() => undefined).finally(() => (this.blocking = undefined));
      this.blocking.catch(() => undefined); // a wake-up nobody waits for any more may fail unseen (the connection closed)
    }
    const blocking = this.blocking;
    // A push (or rescan) since the lease that came back short, while the pump was on its way here
    // (making the blocking connection, say), found no wait to end: lease again rather than block.
    if (this.pushes !== this.emptiedAt) return;
    await new Promise<void>((resolve, reject) => {
      this.wake = resolve;
      blocking.then(resolve, reject);
    });
    this.wake = undefined;
  }

  /** The blocking call that returns once the queue may have items; it takes none. */
  protected wakeUp(blocker: RedisClient): Promise<unknown> {
    return blocker.blmoveBuffer(this.config.name, this.config.name, "RIGHT", "RIGHT", this.host.options.blockTimeoutSec);
  }

  /**
   * This instance has just sent a push to the queue, on the command connection.
   * If the pump waits for items, it leases now: its lease script goes out on
   * the same connection behind the push, so Redis runs it right after, a round
   * trip sooner than the blocking wake-up would have let it. A lease already
   * in flight ran before the push: if it comes back short, the pump leases
   * again rather than waiting on a wake-up (a round trip more). Other instances
   * still learn of the items from their own wake-ups.
   */
  pushed(): void {
    this.pushes++;
    this.wake?.();
  }

  private distribute(taken: Taken[]): void {
    let i = 0;
    const n = this.streams.length;
    const refused: Taken[] = [];
    for (let visited = 0; visited < n && i < taken.length; visited++) {
      const stream = this.streams[(this.next + visited) % n];
      const room = stream.free();
      if (room === 0) continue;
      const batch: Delivery[] = [];
      const from = i;
      for (const end = Math.min(taken.length, i + room); i < end; i++) {
        const t = taken[i];
        const token = this.tokenOf(t.ref);
        const item = t.item ?? decodeItem(t.value!);
        // This delivery's number: the deliveries its history records, and this one (always 1 on a simple queue).
        const deliveryCount = t.ref.owner ? item.deliveries + 1 : 1;
        batch.push({ token, fence: t.ref.fence, deliveryCount, queue: this.config.name, item, lastError: item.lastError });
      }
      // An item no message to this worker can carry would fail its stream, and every stream after it:
      // the sink leaves it out and says why, and it goes to the dead letters alone.
      let undeliverable: Map<Delivery, string> | undefined;
      // A stream that has ended but is not closed yet writes nothing: its items go back, and it takes no more.
      if (!stream.sink.deliver(batch, (d, reason) => (undeliverable ??= new Map()).set(d, reason))) {
        refused.push(...taken.slice(from, i));
        stream.credit = 0;
        continue;
      }
      const tokens: string[] = [];
      batch.forEach((d, j) => {
        const reason = undeliverable?.get(d);
        if (reason !== undefined) this.deadLetter(taken[from + j], reason);
        else {
          stream.held.set(d.token, taken[from + j].ref);
          tokens.push(d.token);
        }
      });
      this.host.onHold(tokens, stream);
      stream.lastSendMs = this.host.clock.now();
    }
    this.next = n === 0 ? 0 : (this.next + 1) % n;
    refused.push(...taken.slice(i));
    this.refused.push(...refused);
  }

  /** An item that can never be delivered: to the dead letters with `reason` (a simple queue has none: it is dropped). */
  private deadLetter(t: Taken, reason: string): void {
    const { name, mode } = this.config;
    if (mode !== "simple") {
      this.host.log.warn("dead-lettering an item that fits no delivery message", { queue: name, fence: t.ref.fence, reason });
      this.host.kill(this.config, t.ref, reason);
      return;
    }
    this.host.log.error("dropping an item of a simple queue that fits no delivery message", { queue: name, bytes: t.value?.length ?? 0, reason });
  }

  /** The lease token of a delivery. */
  protected tokenOf(ref: LeaseRef): string {
    return this.token(ref.fence, ref.owner);
  }

  /** Returns items that no stream could take to the front of the queue, uncounted and in their order. */
  private giveBack(taken: Taken[]): void {
    if (this.config.mode === "simple") {
      void pushBackPopped(this.host.redis.client, this.config.name, taken.map((t) => t.value!), this.host.log);
      return;
    }
    this.givingBack++;
    const done = () => {
      this.givingBack--;
      this.kick();
    };
    this.host.giveBack(this.config, [...taken].reverse().map((t) => t.ref)).then(done, done);
  }
}

/**
 * A call refused, after ioredis's own retries, because a cluster slot its keys
 * are in was migrating (TRYAGAIN: keys of one call on two masters; or ASK,
 * MOVED, CLUSTERDOWN to the last).
 */
function movingSlot(err: unknown): boolean {
  return err instanceof Error && /^(?:Too many Cluster redirections\. Last error: (?:ReplyError: )?)?(?:TRYAGAIN|ASK|MOVED|CLUSTERDOWN)\b/.test(err.message);
}

/**
 * Pushes popped items of simple queue `queue` back to its front, the first of
 * `values` in front. At most once: a push Redis refuses loses them (logged), as
 * a pop whose answer is lost would. Resolves to whether Redis took them.
 */
export function pushBackPopped(redis: RedisClient, queue: string, values: readonly Buffer[], log: Logger): Promise<boolean> {
  if (values.length === 0) return Promise.resolve(true);
  return redis.rpush(queue, ...[...values].reverse()).then(
    () => true,
    (err: unknown) => {
      log.error("could not push back popped items of a simple queue: they are lost", { queue, items: values.length, err });
      return false;
    },
  );
}

/** The leases-hash field of each reliable delivery (simple ones have none). */
export function fieldsOf(refs: readonly LeaseRef[]): string[] {
  return refs.filter((r) => r.owner).map(deliveryField);
}
