/**
 * The work-queue capability as one object: enqueue, lease streams, settles,
 * stats. Transports (gRPC) call it; it knows nothing of them.
 */
import { SwitchyardError, invalid } from "../errors.js";
import { systemClock, type Clock } from "../clock.js";
import type { Logger } from "../log.js";
import { noMetrics, type Metrics } from "../metrics/hooks.js";
import { MAX_REPLICA_WAIT_MS, type RedisConnection } from "../redis/connection.js";
import { FramedCommand, type BulkStrings } from "../redis/bulk-strings.js";
import { pushItems, type DeadLetterAction, type SettleAction } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { QueueDispatcher, type DispatchOptions } from "./dispatcher.js";
import { encodeItems } from "./envelope.js";
import { ItemIds } from "./item-ids.js";
import { itemsOf, type NewItem, type NewItems } from "./new-items.js";
import { LeaseStream, type LeaseSink } from "./lease-stream.js";
import { peekItems, type PeekList, type PeekedItem } from "./peek.js";
import { purgeReady, settleDeadLetterSelection, type DeadLetterSelection } from "./admin.js";
import { PushBatcher } from "./push-batcher.js";
import type { QueueRegistry } from "./registry.js";
import { Settler } from "./settler.js";
import { parseToken, type LeaseRef } from "./token.js";
import { Watchdog } from "./watchdog.js";
import { ByteBudget } from "./byte-budget.js";

/** Limits and tuning of the queue capability. */
export interface QueueOptions extends DispatchOptions {
  maxPayloadBytes: number;
  /** Largest stored form of one item (payload, headers, envelope). */
  maxItemBytes: number;
  /** Bytes of items this instance holds while their pushes wait for Redis. */
  maxPendingEnqueueBytes: number;
  maxItemsPerEnqueue: number;
  maxCredit: number;
  heartbeatIntervalMs: number;
  watchdogIntervalMs: number;
}

export type { NewItem, NewItems } from "./new-items.js";

/** More replicas than any Redis deployment has; WAIT for more could only time out. */
const MAX_REPLICAS = 64;

/** Wait for replicas before answering an enqueue (Redis WAIT). */
export interface ReplicaWait {
  replicas: number;
  timeoutMs: number;
}

/** Outcome of a settle. */
export interface SettleOutcome {
  deadLettered: boolean;
  /** For extends with a recovery set: when the watchdog may next recover the item (ms). */
  expireTimeMs?: number;
}

const actionNames: Record<SettleAction, string> = {
  a: "ack", d: "drop", r: "retry", b: "return", u: "return", x: "extend", c: "check",
};

/** A settle of a batch that did not apply, and why. */
export interface SettleFailure {
  token: string;
  error: unknown;
}

/** The error for a settle.lua code below 0. */
function settleError(code: number, action: SettleAction, ref: LeaseRef): SwitchyardError {
  const what = actionNames[action];
  switch (code) {
    case -1:
      return new SwitchyardError(
        "failed_precondition",
        `cannot ${what}: lease ${ref.fence} on "${ref.queue}" is no longer held; the item was settled, or recovered after min_idle`,
      );
    case -2:
      return new SwitchyardError(
        "failed_precondition",
        `cannot ${what}: lease ${ref.fence} on "${ref.queue}" was superseded; the item was recovered and leased again`,
      );
    default:
      return new SwitchyardError("not_found", `cannot ${what}: no lease ${ref.fence} was ever issued on "${ref.queue}"`);
  }
}

/** Counts for one queue. */
export interface QueueStatsView {
  queue: string;
  ready: number;
  processing: number;
  deadLetter: number;
  oldestClaimAgeMs?: number;
  leaseStreams: number;
  /** Deliveries made since the queue was declared: its fence counter. */
  leased: number;
  /** Items acked or dropped (reliable); for a simple queue, every lease. */
  completed: number;
}

/** A prepared enqueue: validated and encoded, not yet written. */
interface PreparedEnqueue {
  config: QueueConfig;
  ids: ItemIds;
  /** The items' stored forms, framed for the push. */
  values: BulkStrings;
  ttlMs: number;
}

export class Queues {
  private readonly dispatchers = new Map<string, QueueDispatcher>();
  /** Every token held by a stream on this instance, so a unary settle here frees its credit. */
  private readonly holders = new Map<string, LeaseStream>();
  private readonly streams = new Set<LeaseStream>();
  private draining = false;
  /** Told once when a drain starts (open EnqueueStreams, which then end). */
  private readonly drainListeners = new Set<() => void>();
  /** Called after every release while draining. */
  private onRelease?: () => void;
  private readonly settler: Settler;
  /** Enqueues without a replica wait, coalesced per queue and event-loop turn. */
  private readonly pushes: PushBatcher;
  /** Bytes of items written to Redis and not yet answered, so a hung Redis cannot fill this process. */
  private readonly pending: ByteBudget;
  readonly watchdog: Watchdog;

  constructor(
    readonly registry: QueueRegistry,
    private readonly redis: RedisConnection,
    private readonly clock: Clock,
    private readonly options: QueueOptions,
    private readonly log: Logger,
    private readonly metrics: Metrics = noMetrics,
  ) {
    this.settler = new Settler(redis.client, clock, metrics);
    this.pushes = new PushBatcher((queue, ttlMs, values) => this.push(queue, ttlMs, values), options.maxItemsPerEnqueue);
    this.pending = new ByteBudget(options.maxPendingEnqueueBytes);
    this.watchdog = new Watchdog(redis.client, clock, () => registry.known(), options.watchdogIntervalMs, log, metrics);
    registry.onDeleted((name) => this.onQueueDeleted(name));
  }

  start(): void {
    this.watchdog.start();
  }

  /**
   * Graceful shutdown (SPEC S5): refuses new streams, stops deliveries, sends
   * every stream a drain notice, waits up to `graceMs` for held items to be
   * settled, then returns what is left and ends the streams. The grace is wall
   * time (a process lifecycle deadline, like Kubernetes' termination period),
   * not the injected clock.
   */
  async drain(graceMs: number): Promise<void> {
    this.draining = true;
    for (const listener of this.drainListeners) listener();
    this.drainListeners.clear();
    for (const stream of this.streams) {
      stream.credit = 0;
      stream.sink.drain(graceMs);
    }
    const settled = () => [...this.streams].every((s) => s.held.size === 0);
    if (!settled()) {
      await new Promise<void>((done) => {
        const timer = systemClock.setTimer(graceMs, done);
        this.onRelease = () => {
          if (!settled()) return;
          timer.cancel();
          done();
        };
      });
      this.onRelease = undefined;
    }
    const open = [...this.streams];
    await this.stop();
    for (const stream of open) stream.sink.end();
  }

  /** Bytes of enqueued items written to Redis and not yet answered. */
  get pendingEnqueueBytes(): number {
    return this.pending.used;
  }

  /** True once a drain (graceful shutdown) has started. */
  get isDraining(): boolean {
    return this.draining;
  }

  /** Calls `listener` once a drain starts (at once if one has); returns how to stop listening. */
  onDrain(listener: () => void): () => void {
    if (this.draining) {
      listener();
      return () => undefined;
    }
    this.drainListeners.add(listener);
    return () => this.drainListeners.delete(listener);
  }

  /** Stops the watchdog and every pump, and returns every open stream's items to their queues. */
  async stop(): Promise<void> {
    this.watchdog.stop();
    for (const name of [...this.dispatchers.keys()]) this.closeDispatcher(name);
    await Promise.all([...this.streams].map((s) => this.closeStream(s)));
  }

  private closeDispatcher(name: string): void {
    this.dispatchers.get(name)?.close();
    this.dispatchers.delete(name);
  }

  private onQueueDeleted(name: string): void {
    this.closeDispatcher(name);
    const gone = new SwitchyardError("not_found", `queue "${name}" was deleted`);
    for (const stream of this.streams) if (stream.queue === name) stream.sink.fail(gone);
  }

  private async prepare(queue: string, given: readonly NewItem[] | NewItems, ttlMs: number): Promise<PreparedEnqueue> {
    const items = itemsOf(given);
    if (items.count === 0) throw invalid("items must not be empty");
    if (items.count > this.options.maxItemsPerEnqueue) {
      throw invalid(`${items.count} items in one Enqueue; send at most ${this.options.maxItemsPerEnqueue} per call (SWITCHYARD_MAX_ITEMS_PER_ENQUEUE)`);
    }
    if (!Number.isFinite(ttlMs) || ttlMs < 0) throw invalid("ttl must be a positive duration");
    for (let i = 0; i < items.count; i++) {
      const size = items.payloadSize(i);
      if (size > this.options.maxPayloadBytes) {
        throw new SwitchyardError(
          "resource_exhausted",
          `item ${i} has a payload of ${size} bytes; the limit is ${this.options.maxPayloadBytes} (SWITCHYARD_MAX_PAYLOAD_BYTES)`,
        );
      }
    }
    const config = await this.registry.get(queue);
    const now = this.clock.now();
    const ids = ItemIds.next(items.count);
    return { config, ids, values: encodeItems(ids, items, now, FramedCommand.lpushRoom(config.name), this.options.maxItemBytes), ttlMs };
  }

  private async write(p: PreparedEnqueue, wait?: ReplicaWait): Promise<ItemIds> {
    // Redis unreachable: fail now, as a lone push would (ioredis keeps no offline queue here),
    // rather than wait behind a push that ioredis holds to send again once it has reconnected,
    // which can take as long as a restarted Redis takes to load its data.
    if (!this.redis.ready()) throw new SwitchyardError("unavailable", "redis is unavailable; retry later");
    const bytes = p.values.buffer.length;
    if (!this.pending.take(bytes)) {
      throw new SwitchyardError(
        "resource_exhausted",
        `${this.pending.used} bytes of enqueued items already wait for Redis on this instance, the limit ` +
          `(SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES=${this.pending.limit}); Redis is slow or unreachable: retry later`,
      );
    }
    try {
      return await this.pushNow(p, wait);
    } finally {
      this.pending.give(bytes);
    }
  }

  private async pushNow(p: PreparedEnqueue, wait?: ReplicaWait): Promise<ItemIds> {
    if (!wait) {
      await this.pushes.push(p.config.name, Math.ceil(p.ttlMs), p.values);
      this.metrics.items(p.config.name, "enqueued", p.ids.count);
      return p.ids;
    }
    const acked = await this.pushes.alone(p.config.name, () => this.push(p.config.name, Math.ceil(p.ttlMs), [p.values], wait));
    this.metrics.items(p.config.name, "enqueued", p.ids.count);
    if (acked < wait.replicas) {
      throw new SwitchyardError(
        "unavailable",
        `the items reached the master of "${p.config.name}" but only ${acked} of ${wait.replicas} replica(s) acknowledged them ` +
          `within ${wait.timeoutMs} ms, so a failover could lose them; retrying may enqueue them twice`,
      );
    }
    return p.ids;
  }

  /**
   * Pushes items onto a declared queue (LPUSH), resetting its expiry when
   * `ttlMs` > 0; with `wait`, answers only once that many replicas have them.
   */
  async enqueue(queue: string, items: readonly NewItem[] | NewItems, ttlMs = 0, wait?: ReplicaWait): Promise<string[]> {
    return (await this.enqueueIds(queue, items, ttlMs, wait)).toArray();
  }

  /** enqueue(), resolving to the ids as ItemIds: for callers that write them out, with no string per id. */
  async enqueueIds(queue: string, items: readonly NewItem[] | NewItems, ttlMs = 0, wait?: ReplicaWait): Promise<ItemIds> {
    if (wait && (!Number.isInteger(wait.replicas) || wait.replicas < 0 || wait.replicas > MAX_REPLICAS)) {
      throw invalid(`min_replicas must be between 0 and ${MAX_REPLICAS}`);
    }
    if (wait && (wait.timeoutMs <= 0 || wait.timeoutMs > MAX_REPLICA_WAIT_MS)) {
      throw invalid(`replica_timeout must be more than 0 and at most ${MAX_REPLICA_WAIT_MS / 1000}s`);
    }
    return this.write(await this.prepare(queue, items, ttlMs), wait && wait.replicas > 0 ? wait : undefined);
  }

  /** Opens a lease stream on a declared queue. */
  async openStream(queue: string, credit: number, sink: LeaseSink): Promise<LeaseStream> {
    if (this.draining) throw new SwitchyardError("unavailable", "this instance is shutting down; open the lease stream on another instance");
    this.checkCredit(credit, true);
    const config = await this.registry.get(queue);
    const stream = new LeaseStream(config, credit, sink, this.clock.now());
    let dispatcher = this.dispatchers.get(queue);
    if (!dispatcher) {
      dispatcher = new QueueDispatcher(config, this.redis, this.clock, this.settler, this.options, this.log, (tokens, s) => {
        for (const token of tokens) this.holders.set(token, s);
        this.metrics.items(s.queue, "leased", tokens.length);
      });
      this.dispatchers.set(queue, dispatcher);
    }
    dispatcher.add(stream);
    this.streams.add(stream);
    this.scheduleHeartbeat(stream);
    return stream;
  }

  private checkCredit(credit: number, opening: boolean): void {
    const min = opening ? 1 : 0;
    if (!Number.isInteger(credit) || credit < min || credit > this.options.maxCredit) {
      throw invalid(`credit must be between ${min} and ${this.options.maxCredit}`);
    }
  }

  /** Lets a stream take deliveries again once its transport drained (see LeaseSink.backlogged). */
  resume(stream: LeaseStream): void {
    if (!stream.closed) this.dispatchers.get(stream.queue)?.kick();
  }

  /** Changes a stream's credit (max in flight). */
  setCredit(stream: LeaseStream, credit: number): void {
    this.checkCredit(credit, false);
    if (this.draining) return; // a draining stream takes nothing more
    stream.credit = credit;
    this.dispatchers.get(stream.queue)?.kick();
  }

  /**
   * Every heartbeat interval: a keep-alive if the stream was idle (SPEC Q12),
   * and a check of the items it holds, so an item settled through another
   * instance stops counting against its credit.
   */
  private scheduleHeartbeat(stream: LeaseStream): void {
    if (stream.closed) return; // closed while its items were checked
    const interval = this.options.heartbeatIntervalMs;
    stream.heartbeat = this.clock.setTimer(interval - (this.clock.now() - stream.lastSendMs), async () => {
      if (stream.closed) return;
      const now = this.clock.now();
      if (now - stream.lastSendMs >= interval) {
        stream.lastSendMs = now;
        stream.sink.heartbeat(now);
      }
      await this.forgetSettledElsewhere(stream).catch((err: unknown) => this.log.warn("lease check failed", { err }));
      this.scheduleHeartbeat(stream);
    });
  }

  private async forgetSettledElsewhere(stream: LeaseStream): Promise<void> {
    const held = [...stream.held].filter(([, ref]) => ref.sha);
    if (held.length === 0) return;
    const codes = await this.settler.settleMany(stream.config, held.map(([, ref]) => ({ action: "c", sha: ref.sha, fence: ref.fence })));
    held.forEach(([token], i) => {
      if (codes[i] < 0) this.release(token, stream);
    });
  }

  /** Marks a delivery as no longer held by its stream, freeing a unit of credit. */
  private release(token: string, ownStream?: LeaseStream): void {
    const stream = ownStream?.held.has(token) ? ownStream : this.holders.get(token);
    if (!stream || !stream.held.delete(token)) return;
    this.holders.delete(token);
    this.dispatchers.get(stream.queue)?.kick();
    this.onRelease?.();
  }

  /**
   * Ends a stream: its unsettled reliable items go back to the front of the
   * queue at once (counted as a delivery), without waiting for min_idle.
   */
  async closeStream(stream: LeaseStream): Promise<void> {
    if (stream.closed) return;
    stream.closed = true;
    stream.heartbeat?.cancel();
    this.streams.delete(stream);
    const dispatcher = this.dispatchers.get(stream.queue);
    dispatcher?.remove(stream);
    const held = [...stream.held.values()];
    for (const token of stream.held.keys()) this.holders.delete(token);
    stream.held.clear();
    if (held.length === 0 || !held[0].sha) return;
    // Each return goes to the front: push the last delivered first so the queue keeps its order.
    await this.settler.settleMany(stream.config, held.reverse().map((ref) => ({ action: "b", sha: ref.sha, fence: ref.fence })));
  }

  /**
   * Settles the delivery a token names. Simple queues accept and change
   * nothing (the item left Redis when it was popped).
   */
  async settle(token: string, action: SettleAction, fromStream?: LeaseStream): Promise<SettleOutcome> {
    const ref = parseToken(token);
    const config = await this.registry.get(ref.queue);
    if (config.mode === "simple" || !ref.sha) {
      if (action !== "x" && action !== "c") this.release(token, fromStream);
      if (action === "a" || action === "d") this.metrics.items(config.name, action === "a" ? "acked" : "dropped");
      return { deadLettered: false };
    }
    const code = await this.settler.settle(config, { action, sha: ref.sha, fence: ref.fence });
    if ((action !== "x" && action !== "c") || code < 0) this.release(token, fromStream);
    if (code < 0) throw settleError(code, action, ref);
    return {
      deadLettered: code === 2,
      expireTimeMs: action === "x" && config.recoverySet ? this.clock.now() + config.minIdleMs : undefined,
    };
  }

  /**
   * Acknowledges deliveries (no replies) as `settle(token, "a")` would each,
   * with one settle call per queue for all of them. Resolves to the tokens
   * that failed, each with its own error; rejects only when Redis could not
   * be asked (then none of them is known to have applied).
   */
  async ackMany(tokens: readonly string[], fromStream?: LeaseStream): Promise<SettleFailure[]> {
    const failures: SettleFailure[] = [];
    const byQueue = new Map<string, { token: string; ref: LeaseRef }[]>();
    for (const token of tokens) {
      let ref: LeaseRef;
      try {
        ref = parseToken(token);
      } catch (error) {
        failures.push({ token, error });
        continue;
      }
      let group = byQueue.get(ref.queue);
      if (!group) byQueue.set(ref.queue, (group = []));
      group.push({ token, ref });
    }
    await Promise.all([...byQueue].map(async ([queue, group]) => {
      let config: QueueConfig;
      try {
        config = await this.registry.get(queue);
      } catch (error) {
        for (const { token } of group) failures.push({ token, error });
        return;
      }
      // Simple queues, and tokens without an item hash, have nothing to settle: the item left Redis when it was popped.
      const settles: typeof group = [];
      let popped = 0;
      for (const g of group) {
        if (config.mode === "reliable" && g.ref.sha) settles.push(g);
        else {
          this.release(g.token, fromStream);
          popped++;
        }
      }
      if (popped > 0) this.metrics.items(config.name, "acked", popped);
      const codes = await this.settler.settleMany(config, settles.map(({ ref }) => ({ action: "a", sha: ref.sha, fence: ref.fence })));
      settles.forEach(({ token, ref }, i) => {
        this.release(token, fromStream);
        if (codes[i] < 0) failures.push({ token, error: settleError(codes[i], "a", ref) });
      });
    }));
    return failures;
  }

  /**
   * Acknowledges a delivery. Replies are enqueued after the lease is checked
   * and before the ack, so a crash in between repeats the replies rather than
   * losing them (at least once).
   */
  async ack(token: string, reply?: { queue: string; items: NewItem[]; ttlMs: number }, fromStream?: LeaseStream): Promise<string[]> {
    if (!reply || reply.items.length === 0) {
      await this.settle(token, "a", fromStream);
      return [];
    }
    const prepared = await this.prepare(reply.queue, reply.items, reply.ttlMs);
    await this.settle(token, "c", fromStream);
    const ids = (await this.write(prepared)).toArray();
    await this.settle(token, "a", fromStream);
    return ids;
  }

  /** Items of a declared queue's ready or dead-letter list, next to leave first, without moving them. */
  async peek(name: string, list: PeekList, limit: number): Promise<{ items: PeekedItem[]; total: number }> {
    return peekItems(this.redis.client, await this.registry.get(name), list, limit);
  }

  /**
   * Pushes onto `queue`, and a waiting pump of this instance leases right behind it.
   * A push that waits for replicas goes on the waiter connection (WAIT blocks the
   * connection it is sent on); its queue's order holds, as nothing else to the queue is
   * in flight meanwhile (PushBatcher.alone), and the pump's wake-up finds its items.
   */
  private push(queue: string, ttlMs: number, values: BulkStrings[], wait?: ReplicaWait): Promise<number> {
    if (wait) {
      const replyMs = this.redis.commandTimeoutMs;
      return this.redis.waiter().then((waiter) => pushItems(waiter, queue, ttlMs, values, { ...wait, replyMs }));
    }
    const pushed = pushItems(this.redis.client, queue, ttlMs, values);
    this.dispatchers.get(queue)?.pushed(); // after the push is sent, so the lease reaches Redis after it
    return pushed;
  }

  /** Deletes the items waiting in a declared queue; resolves to how many. */
  async purge(name: string): Promise<number> {
    return purgeReady(this.redis.client, await this.registry.get(name));
  }

  /** Requeues or deletes dead letters of a declared reliable queue; resolves to how many. */
  async settleDeadLetters(name: string, action: DeadLetterAction, selection: DeadLetterSelection): Promise<number> {
    return settleDeadLetterSelection(this.redis.client, await this.registry.get(name), action, selection);
  }

  /** Depth, processing, dead letters and oldest claim age of a declared queue. */
  async stats(name: string): Promise<QueueStatsView> {
    const config = await this.registry.get(name);
    const { client } = this.redis;
    const keys = keysOf(config);
    const reliable = config.mode === "reliable";
    const [ready, processing, deadLetter, oldest, leased, completed] = await Promise.all([
      client.llen(keys.queue),
      reliable ? client.llen(keys.processing) : 0,
      reliable ? client.llen(keys.deadLetter) : 0,
      config.recoverySet ? client.zrange(config.recoverySet, 0, 0, "WITHSCORES") : [],
      client.get(keys.fence),
      reliable ? client.hget(keys.deliveries, "completed") : null,
    ]);
    return {
      queue: name,
      ready,
      processing,
      deadLetter,
      oldestClaimAgeMs: oldest.length === 2 ? Math.max(0, this.clock.now() - Number(oldest[1])) : undefined,
      leaseStreams: this.dispatchers.get(name)?.streamCount ?? 0,
      leased: Number(leased ?? 0),
      completed: Number((reliable ? completed : leased) ?? 0),
    };
  }
}
