/**
 * The work-queue capability as one object: enqueue, lease streams, settles,
 * stats. Transports (gRPC) call it; it knows nothing of them.
 */
import { SwitchyardError, invalid } from "../errors.js";
import { systemClock, type Clock, type Timer } from "../clock.js";
import type { Logger } from "../log.js";
import { noMetrics, type Metrics } from "../metrics/hooks.js";
import { MAX_REPLICA_WAIT_MS, execAll, type RedisConnection } from "../redis/connection.js";
import { FramedCommand, type BulkStrings } from "../redis/bulk-strings.js";
import { enqueueScheduled, pushItems, pushRoom, type DeadLetterAction, type SettleCode, type SettleOp, type SettleResult } from "../redis/scripts.js";
import { systemKeys } from "../redis/keys.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { DelayedItems } from "./delayed.js";
import { fieldsOf, pushBackPopped, QueueDispatcher, type DispatchHost, type DispatchOptions } from "./dispatcher.js";
import { encodeItems } from "./envelope.js";
import { ItemIds } from "./item-ids.js";
import { itemsOf, type NewItem, type NewItems } from "./new-items.js";
import { LeaseStream, type LeaseSink } from "./lease-stream.js";
import { peekItems, type PeekList, type PeekedItem } from "./peek.js";
import { purgeReady, settleDeadLetterSelection, type DeadLetterSelection } from "./admin.js";
import { PushBatcher } from "./push-batcher.js";
import type { QueueRegistry } from "./registry.js";
import { Returns } from "./returns.js";
import { Settler } from "./settler.js";
import { Instances } from "./instances.js";
import { deliveryField, parseToken, tokenFormatter, tokenMode, type LeaseRef } from "./token.js";
import { StreamDispatcher } from "./stream/dispatcher.js";
import { appendEntries, groupNotFound, groupStats, wrongType, type GroupStats } from "./stream/entries.js";
import { createConsumerGroup, deleteConsumerGroup, setConsumerGroupPosition } from "./stream/groups.js";
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
  /** Prefix and hash tag of Switchyard's own keys. */
  namespace: string;
  /** Silence after which an instance counts as dead, and its deliveries go back. */
  instanceTimeoutMs: number;
}

/** The settles a worker asks for. */
export type WorkerSettle = "ack" | "retry" | "drop" | "extend" | "check";

/** An ack's replies: enqueued onto `queue`, or the queue's standing reply route (Queue.reply_queue). */
export interface AckReply {
  queue?: string;
  items: NewItem[];
  ttlMs: number;
  /** Throws when the caller may not enqueue onto the route the replies take (the access table sees only a named one). */
  mayEnqueue?: (queue: string) => void;
}

/** What a retry or drop may say. */
export interface SettleOptions {
  /** Why the delivery failed (retry, drop); cut to MAX_REASON_CHARS. */
  reason?: string;
  /** retry: wait this long instead of the queue's retry policy. */
  delayMs?: number;
}

/** The most characters of a failure reason kept (queue.proto: RetryRequest.reason). */
export const MAX_REASON_CHARS = 1000;

export type { NewItem, NewItems } from "./new-items.js";

/** More replicas than any Redis deployment has; WAIT for more could only time out. */
const MAX_REPLICAS = 64;

/**
 * How long, and how many, simple deliveries settled elsewhere stay announced
 * for an instance whose pub/sub connection missed them (releaseSimple): a
 * reconnect takes about a second.
 */
const RECENT_RELEASES_MS = 10 * 60_000;
const RECENT_RELEASES = 10_000;
/** How often a failed record of simple deliveries settled here for streams elsewhere is tried again (see announceReleases). */
const ANNOUNCE_RETRY_MS = 1000;

/**
 * How far the clock of an instance that settles a simple delivery for a stream
 * elsewhere may read behind the holder's (both synced to Redis TIME, to within
 * half a round trip and the drift between syncs): a settle up to this long
 * before the delivery's pop still frees it (see releaseRecorded).
 */
export const SETTLE_CLOCK_SLACK_MS = 1000;

/** A simple delivery settled here for a stream elsewhere, as the released channel carries it: its token, a space, when it was settled (ms). */
function releasedMessage(token: string, settledMs: number): string {
  return `${token} ${settledMs}`;
}

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
  /** For retries that applied and were not dead-lettered: when the item is due again (ms). */
  dueMs?: number;
}

/** A settle of a batch that did not apply, and why. */
export interface SettleFailure {
  token: string;
  error: unknown;
}

/** The error for a settle that did not apply. */
function settleError(code: SettleCode, action: WorkerSettle | "release", ref: LeaseRef): SwitchyardError {
  const metadata = { queue: ref.queue, fence: String(ref.fence) };
  switch (code) {
    case "not_held":
      return new SwitchyardError(
        "failed_precondition",
        `cannot ${action}: lease ${ref.fence} on "${ref.queue}" is no longer held; it was settled already`,
        { reason: "LEASE_NOT_HELD", metadata },
      );
    case "superseded":
      return new SwitchyardError(
        "failed_precondition",
        `cannot ${action}: lease ${ref.fence} on "${ref.queue}" was superseded; the item went back to the queue ` +
          `(its stream ended, its instance stopped, or min_idle passed) and may be leased again`,
        { reason: "LEASE_SUPERSEDED", metadata },
      );
    default:
      return new SwitchyardError("not_found", `cannot ${action}: no lease ${ref.fence} was ever issued on "${ref.queue}"`, {
        reason: "LEASE_UNKNOWN",
        metadata,
      });
  }
}

/** Cuts a failure reason to MAX_REASON_CHARS characters (code points, not UTF-16 units). */
export function cutReason(reason: string | undefined): string {
  if (!reason) return "";
  const chars = [...reason];
  return chars.length <= MAX_REASON_CHARS ? reason : chars.slice(0, MAX_REASON_CHARS).join("");
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
  /** Items waiting for their time. */
  delayed: number;
  paused: boolean;
  /** Items acked or dropped (reliable, stream); for a simple queue, every lease. */
  completed: number;
  /** Stream queues: each consumer group. */
  groups: GroupStats[];
}

/** A prepared enqueue onto a stream queue: validated, not yet appended. */
interface PreparedAppend {
  config: QueueConfig;
  entries: NewItems;
  ttlMs: number;
}

/** FAILED_PRECONDITION for a read Redis refused because `key` is not a `type`; `err` itself otherwise. */
function keyOfType(key: string, type: string, err: Error): Error {
  if (!err.message.startsWith("WRONGTYPE")) return err;
  return new SwitchyardError("failed_precondition", `key "${key}" is not a ${type}; delete or rename it: the queue needs it`, {
    reason: "WRONG_KEY_TYPE", metadata: { key },
  });
}

/** The key of the dispatcher serving a queue's streams (for a stream queue, those of one group). */
function dispatcherKey(queue: string, group: string): string {
  return group ? `${queue}\n${group}` : queue;
}

/** A prepared enqueue: validated and encoded, not yet written. */
interface PreparedEnqueue {
  config: QueueConfig;
  ids: ItemIds;
  /** The items' stored forms, framed for the push. */
  values: BulkStrings;
  ttlMs: number;
  /** Items that wait for a time or carry an idempotency key: each item's schedule and key, in order. */
  options?: { dueMs: number; idempotencyKey: string }[];
}

type Prepared = PreparedEnqueue | PreparedAppend;

/**
 * What an enqueue of items with a time or an idempotency key answers: one id
 * per item (for an item whose key was used before, the first item's id) and
 * the indexes of those duplicates.
 */
export class ScheduledEnqueue {
  constructor(
    readonly ids: string[],
    readonly duplicates: number[],
  ) {}
}

/** The longest idempotency key (queue.proto: EnqueueItem.idempotency_key). */
export const MAX_IDEMPOTENCY_KEY_BYTES = 256;
/** How far ahead an item may be scheduled. */
const MAX_SCHEDULE_MS = 10 * 365 * 24 * 3600_000;

/** Each item's due time (0: now) and idempotency key, checked; INVALID_ARGUMENT naming the item's field. */
function scheduleOf(items: NewItems, now: number): { dueMs: number; idempotencyKey: string }[] {
  const out: { dueMs: number; idempotencyKey: string }[] = [];
  for (let i = 0; i < items.count; i++) {
    const o = items.options(i);
    const bad = (field: string, description: string) =>
      new SwitchyardError("invalid_argument", `items[${i}].${field} ${description}`, { reason: "INVALID_FIELD", violations: [{ field: `items[${i}].${field}`, description }] });
    if (o?.conflict) throw bad("delay", "is given with not_before; give one of them");
    const key = o?.idempotencyKey ?? "";
    if (Buffer.byteLength(key) > MAX_IDEMPOTENCY_KEY_BYTES) throw bad("idempotency_key", `is longer than ${MAX_IDEMPOTENCY_KEY_BYTES} bytes`);
    let dueMs = 0;
    const s = o?.schedule;
    if (s && "delayMs" in s) {
      if (!Number.isFinite(s.delayMs) || s.delayMs < 0) throw bad("delay", "must not be negative");
      if (s.delayMs > MAX_SCHEDULE_MS) throw bad("delay", "is more than 10 years");
      dueMs = s.delayMs > 0 ? now + s.delayMs : 0;
    } else if (s) {
      if (!Number.isFinite(s.notBeforeMs)) throw bad("not_before", "is not a time");
      if (s.notBeforeMs > now + MAX_SCHEDULE_MS) throw bad("not_before", "is more than 10 years ahead");
      dueMs = s.notBeforeMs > now ? s.notBeforeMs : 0;
    }
    out.push({ dueMs, idempotencyKey: key });
  }
  return out;
}

/** Bytes of the payloads appended to a stream queue, held against the pending-enqueue budget meanwhile. */
function appendSize(items: NewItems): number {
  let n = 0;
  for (let i = 0; i < items.count; i++) n += items.payloadSize(i);
  return n;
}

/** UNAVAILABLE when fewer replicas than asked acknowledged an enqueue's writes. */
function checkReplicas(queue: string, acked: number, wait: ReplicaWait): void {
  if (acked >= wait.replicas) return;
  throw new SwitchyardError(
    "unavailable",
    `the items reached the master of "${queue}" but only ${acked} of ${wait.replicas} replica(s) acknowledged them ` +
      `within ${wait.timeoutMs} ms, so a failover could lose them; retrying may enqueue them twice`,
    { reason: "REDIS_UNAVAILABLE" },
  );
}

/** FAILED_PRECONDITION for a list operation asked of a stream queue. */
function notOnStreams(config: QueueConfig, what: string): SwitchyardError | undefined {
  if (config.mode !== "stream") return undefined;
  return new SwitchyardError("failed_precondition", `${what} works on list queues; "${config.name}" is a STREAM queue (its entries stay as history until trimmed)`, {
    reason: "WRONG_QUEUE_MODE", metadata: { queue: config.name },
  });
}

export class Queues {
  private readonly dispatchers = new Map<string, QueueDispatcher>();
  /** Every token held by a stream on this instance, so a unary settle here frees its credit. */
  private readonly holders = new Map<string, LeaseStream>();
  private readonly streams = new Set<LeaseStream>();
  private draining = false;
  /** Told once when a drain starts (open EnqueueStreams, which then end). */
  private readonly drainListeners = new Set<() => void>();
  /** Held deliveries whose settle failed and whose check could not be sent either: checked once the connection is ready. */
  private readonly rechecks = new Set<string>();
  /** Called after every release while draining. */
  private onRelease?: () => void;
  private readonly settler: Settler;
  /** Enqueues without a replica wait, coalesced per queue and event-loop turn. */
  private readonly pushes: PushBatcher;
  /** Bytes of items written to Redis and not yet answered, so a hung Redis cannot fill this process. */
  private readonly pending: ByteBudget;
  /** Deliveries on their way back to their queues. */
  private readonly returns: Returns;
  readonly instances: Instances;
  readonly watchdog: Watchdog;
  readonly delayed: DelayedItems;
  private readonly dispatchHost: DispatchHost;
  private stopReleases?: () => void;
  /** Every stream a stop() closed: their settles in flight keep any later stop from counting everything as back. */
  private readonly closedByStop = new Set<LeaseStream>();
  /** Simple deliveries settled here for streams elsewhere whose announcement failed, with when: made again (see announceReleases). */
  private readonly unannounced = new Map<string, number>();
  private announceTimer?: Timer;
  /** An announcement failed and none has gone through since (warned once). */
  private announceFailing = false;
  /** Queues whose streams here failed their heartbeat check of held items, none having gone through since (warned once each). */
  private readonly checksFailing = new Set<string>();

  constructor(
    readonly registry: QueueRegistry,
    private readonly redis: RedisConnection,
    private readonly clock: Clock,
    private readonly options: QueueOptions,
    private readonly log: Logger,
    private readonly metrics: Metrics = noMetrics,
  ) {
    // Settles carry their queue's next lease when its pump would lease now. Only then is their credit free
    // before their answer (in the same call as the lease it pays for, so a refused settle refuses its lease too);
    // else their deliveries stay held until the answer, as before.
    this.settler = new Settler(redis.client, clock, metrics, (config, ops, send) => {
      const { freed, group } = this.settling(config, ops);
      if (freed.length === 0) return false;
      if (this.dispatchers.get(dispatcherKey(config.name, group))?.leaseBeside(send)) return true;
      this.heldAgain(freed);
      return false;
    });
    this.pushes = new PushBatcher((queue, ttlMs, values) => this.push(queue, ttlMs, values), options.maxItemsPerEnqueue);
    this.pending = new ByteBudget(options.maxPendingEnqueueBytes);
    this.returns = new Returns(this.settler, (name) => registry.cached(name), log);
    this.instances = new Instances(redis.client, systemKeys(options.namespace), clock, options.instanceTimeoutMs);
    this.delayed = new DelayedItems(redis.client, clock, { all: () => registry.known(), get: (name) => registry.cached(name) }, 1000, log);
    this.watchdog = new Watchdog(
      {
        client: redis.client, clock, log, metrics, instances: this.instances, settler: this.settler,
        queues: () => registry.known(),
        delayed: (config, dueMs) => this.delayed.note(config.name, dueMs),
      },
      options.watchdogIntervalMs,
    );
    this.dispatchHost = {
      redis, clock, log, options, owner: this.instances.id,
      current: (name) => this.registry.current(name),
      onHold: (tokens, s) => {
        for (const token of tokens) this.holders.set(token, s);
        if (s.claimedMs) for (const token of tokens) s.claimedMs.set(token, this.clock.now());
        this.metrics.items(s.queue, "leased", tokens.length);
      },
      giveBack: (config, refs) => this.returns.give(config, fieldsOf(refs), "undo"),
      kill: (config, ref, reason) => void this.returns.give(config, fieldsOf([ref]), "kill", reason),
      reconcile: (config) => this.reconcile(config),
    };
    registry.onDeleted((name) => this.onQueueDeleted(name));
    registry.onChanged((config) => this.onQueueChanged(config));
  }

  async start(): Promise<void> {
    // A simple delivery settled through another instance frees its stream's credit here (see releaseSimple).
    this.stopReleases = await this.redis.subscribe(systemKeys(this.options.namespace).released, this.onReleased, this.onReleasesMissed);
    await this.instances.beat();
    this.watchdog.start();
    this.delayed.start();
    // A lease call cut by a reconnect may have run without its answer arriving: each pump
    // looks for deliveries of this instance that no stream holds before it leases again.
    this.redis.client.on("ready", this.onReconnect);
  }

  private readonly onReconnect = () => {
    // The released channel's own resync may have found this connection down (see releaseSimple).
    this.onReleasesMissed();
    void this.announceAgain();
    for (const d of this.dispatchers.values()) d.markUnsure();
    const tokens = [...this.rechecks];
    this.rechecks.clear();
    for (const token of tokens) this.recheck(token);
  };

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
    const settled = () => [...this.streams].every((s) => s.held.size === 0 && s.settling.size === 0);
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

  /** Entries were added or a group moved (SetConsumerGroupPosition, RequeueDeadLetters): this instance's pumps of the queue read again now. */
  private wakeStreams(name: string): void {
    for (const d of this.dispatchersOf(name)) d.pushed();
  }

  /** Creates a consumer group of a stream queue (see stream/groups.ts); resolves to the declaration with it. */
  createGroup(name: string, group: { name: string; startId?: string }): Promise<QueueConfig> {
    return createConsumerGroup(this.registry, this.redis.client, name, group);
  }

  /** Moves a stream queue's consumer group to entry `id`; this instance's pump of it reads again at once. */
  async moveGroup(name: string, group: string, id: string): Promise<void> {
    await setConsumerGroupPosition(this.registry, this.redis.client, name, group, id);
    this.wakeStreams(name);
  }

  /** Deletes a stream queue's consumer group; resolves to the declaration without it (its streams end). */
  deleteGroup(name: string, group: string): Promise<QueueConfig> {
    return deleteConsumerGroup(this.registry, this.redis.client, name, group);
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

  /**
   * Stops the watchdog and every pump, and returns every open stream's items to
   * their queues. Once Redis took every return, this instance leaves the live
   * set; if it could not (Redis unreachable), it stays there, silent, and another
   * instance returns its deliveries once it counts as dead.
   */
  async stop(returnWithinMs = 5000): Promise<void> {
    this.watchdog.stop();
    this.delayed.stop();
    this.stopReleases?.();
    this.redis.client.off("ready", this.onReconnect);
    // A last try for releases not yet announced (no later one: their holders' credit stays taken if it fails).
    await this.announceAgain();
    this.announceTimer?.cancel();
    this.announceTimer = undefined;
    const groups = [...this.dispatchers.values()].filter((d): d is StreamDispatcher => d instanceof StreamDispatcher);
    for (const d of this.dispatchers.values()) d.close();
    this.dispatchers.clear();
    const open = [...this.streams];
    for (const s of open) this.closedByStop.add(s);
    await Promise.all(open.map((s) => this.closeStream(s)));
    // A delivery whose settle is in flight is neither held nor returning: it is released by its answer, or
    // returned (unsettled) if none comes. Until then this instance may not count everything as back: nor
    // may a later stop (the app's, after drain's), for the streams an earlier one closed.
    const answered = await this.settlesAnswered([...this.closedByStop], returnWithinMs);
    const returned = (await this.returns.idle(returnWithinMs)) && answered;
    this.returns.stop();
    // Stream queues: this instance's consumers leave their groups, once they hold nothing.
    if (returned) {
      await Promise.all(groups.map((g) => g.retire())).catch((err: unknown) => this.log.warn("could not retire a stream consumer", { err }));
    }
    if (returned) await this.instances.leave().catch((err: unknown) => this.log.warn("could not leave the live instances", { err }));
    else this.log.warn("some items could not be returned to their queues; another instance will return them", { items: this.returns.size });
  }

  /** Resolves to true once no stream of `streams` has a settle in flight, false after `timeoutMs` (wall time). */
  private async settlesAnswered(streams: readonly LeaseStream[], timeoutMs: number): Promise<boolean> {
    const answered = () => streams.every((s) => s.settling.size === 0);
    if (answered()) return true;
    const before = this.onRelease;
    try {
      return await new Promise<boolean>((done) => {
        const timer = systemClock.setTimer(timeoutMs, () => done(answered()));
        this.onRelease = () => {
          before?.();
          if (!answered()) return;
          timer.cancel();
          done(true);
        };
      });
    } finally {
      this.onRelease = before;
    }
  }

  /** Closes the dispatchers of queue `name` (for a stream queue, one per group). */
  private closeDispatcher(name: string): void {
    for (const [key, d] of this.dispatchers) {
      if (d.config.name !== name) continue;
      d.close();
      this.dispatchers.delete(key);
    }
  }

  /** The dispatchers of queue `name`. */
  private dispatchersOf(name: string): QueueDispatcher[] {
    return [...this.dispatchers.values()].filter((d) => d.config.name === name);
  }

  /** Tells the pump of a stream queue's group that entries `refs` were handed back: it leases now, and looks for them first. */
  private handedBack(queue: string, group: string, refs: readonly LeaseRef[]): void {
    const d = this.dispatchers.get(dispatcherKey(queue, group));
    if (d instanceof StreamDispatcher) d.handedBack(refs.flatMap((r) => (r.entry ? [r.entry.id] : [])));
  }

  /** The dispatcher serving `stream`. */
  private dispatcherOf(stream: LeaseStream): QueueDispatcher | undefined {
    return this.dispatchers.get(dispatcherKey(stream.queue, stream.group));
  }

  private onQueueDeleted(name: string): void {
    this.closeDispatcher(name);
    this.checksFailing.delete(name);
    const gone = new SwitchyardError("not_found", `queue "${name}" was deleted`, { reason: "QUEUE_NOT_FOUND", metadata: { queue: name } });
    for (const stream of this.streams) if (stream.queue === name) stream.sink.fail(gone);
  }

  /** A declaration changed (UpdateQueue, PauseQueue, a config file): dispatchers and streams use it from now on. */
  private onQueueChanged(config: QueueConfig): void {
    for (const stream of this.streams) {
      if (stream.queue !== config.name) continue;
      stream.config = config;
      this.keepAnnouncedMinIdle(stream);
      // A group deleted (DeleteConsumerGroup): its streams end.
      if (stream.group && !config.groups.some((g) => g.name === stream.group)) stream.sink.fail(groupNotFound(config.name, stream.group));
    }
    for (const dispatcher of this.dispatchersOf(config.name)) {
      const wasPaused = dispatcher.config.paused;
      dispatcher.config = config;
      if (config.paused) dispatcher.interrupt();
      else if (wasPaused) dispatcher.kick();
    }
  }

  /**
   * Gives back every delivery of this instance on the queue that no stream holds
   * and none is returning: a lease call whose answer was lost. Such an item never
   * reached a worker, so it goes back as it was, uncounted (as items no stream could take).
   */
  private async reconcile(config: QueueConfig): Promise<void> {
    const token = tokenFormatter(config.name);
    const me = this.instances.id;
    for await (const fields of this.instances.deliveriesOf(keysOf(config).leases, me)) {
      const orphans = fields.filter((f) => {
        const fence = Number(f.slice(0, f.indexOf("@")));
        return !this.holders.has(token(fence, me)) && !this.returns.has(config.name, f);
      });
      if (orphans.length > 0) {
        this.log.warn("returning deliveries whose lease answer was lost", { queue: config.name, items: orphans.length });
        await this.returns.give(config, orphans, "undo");
      }
    }
  }

  /**
   * Checks and encodes an Enqueue's items for `queue`, and hands them to
   * `then`: at once when the queue's declaration is at hand (the usual case),
   * so the push leaves in the turn that read the request; else in the turn
   * its read answers, with the calls that waited for it in their order.
   */
  private prepare<T>(queue: string, given: readonly NewItem[] | NewItems, ttlMs: number, then: (p: Prepared) => Promise<T>): Promise<T> {
    const items = itemsOf(given);
    if (items.count === 0) throw invalid("items must not be empty", "items");
    if (items.count > this.options.maxItemsPerEnqueue) {
      throw invalid(`${items.count} items in one Enqueue; send at most ${this.options.maxItemsPerEnqueue} per call (SWITCHYARD_MAX_ITEMS_PER_ENQUEUE)`, "items");
    }
    if (!Number.isFinite(ttlMs) || ttlMs < 0) throw invalid("ttl must be a positive duration", "ttl");
    for (let i = 0; i < items.count; i++) {
      const size = items.payloadSize(i);
      if (size > this.options.maxPayloadBytes) {
        throw new SwitchyardError(
          "resource_exhausted",
          `item ${i} has a payload of ${size} bytes; the limit is ${this.options.maxPayloadBytes} (SWITCHYARD_MAX_PAYLOAD_BYTES)`,
          { reason: "PAYLOAD_TOO_LARGE", violations: [{ field: `items[${i}].payload`, description: `at most ${this.options.maxPayloadBytes} bytes` }] },
        );
      }
    }
    const config = this.registry.ready(queue);
    if (!config) return this.registry.get(queue).then((loaded) => then(this.prepareFor(loaded, items, ttlMs)));
    return then(this.prepareFor(config, items, ttlMs));
  }

  private prepareFor(config: QueueConfig, items: NewItems, ttlMs: number): Prepared {
    if (config.mode === "stream") return { config, entries: items, ttlMs: ttlMs || config.publishTtlMs };
    const now = this.clock.now();
    const options = items.hasOptions ? scheduleOf(items, now) : undefined;
    const ids = ItemIds.next(items.count);
    // Room for the head of the command that pushes them: an LPUSH, or on a reliable queue push-lease.lua's.
    const room = config.mode === "reliable" ? pushRoom(keysOf(config), config.recoveryTtlMs, this.instances.id) : FramedCommand.lpushRoom(config.name);
    const values = encodeItems(ids, items, now, room, this.options.maxItemBytes);
    items.release?.();
    return { config, ids, values, ttlMs: ttlMs || config.publishTtlMs, options };
  }

  private async write(p: Prepared, wait?: ReplicaWait): Promise<ItemIds | ScheduledEnqueue> {
    // Redis unreachable: fail now, as a lone push would (ioredis keeps no offline queue here),
    // rather than wait behind a push that ioredis holds to send again once it has reconnected,
    // which can take as long as a restarted Redis takes to load its data.
    if (!this.redis.ready()) throw new SwitchyardError("unavailable", "redis is unavailable; retry later", { reason: "REDIS_UNAVAILABLE" });
    const bytes = "entries" in p ? appendSize(p.entries) : p.values.buffer.length;
    if (!this.pending.take(bytes)) {
      throw new SwitchyardError(
        "resource_exhausted",
        `${this.pending.used} bytes of enqueued items already wait for Redis on this instance, the limit ` +
          `(SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES=${this.pending.limit}); Redis is slow or unreachable: retry later`,
        { reason: "LIMIT_EXCEEDED" },
      );
    }
    try {
      return "entries" in p ? await this.append(p, wait) : await this.pushNow(p, wait);
    } finally {
      this.pending.give(bytes);
    }
  }

  /**
   * Appends items to a stream queue (XADD); the answer's ids are the entry ids.
   * With `wait`, on the waiter connection followed by WAIT (as a list push).
   */
  private async append(p: PreparedAppend, wait?: ReplicaWait): Promise<ScheduledEnqueue> {
    const client = wait ? await this.redis.waiter() : this.redis.client;
    const waitFor = wait && { ...wait, replyMs: this.redis.commandTimeoutMs };
    const { ids, acked } = await appendEntries(client, this.clock, p.config, p.entries, p.ttlMs, waitFor);
    for (const d of this.dispatchersOf(p.config.name)) d.pushed();
    this.metrics.items(p.config.name, "enqueued", ids.length);
    if (wait) checkReplicas(p.config.name, acked, wait);
    return new ScheduledEnqueue(ids, []);
  }

  /** Enqueues items with a time or an idempotency key, in the queue's turn (one script call). */
  private async pushScheduled(p: PreparedEnqueue, options: NonNullable<PreparedEnqueue["options"]>): Promise<ScheduledEnqueue> {
    const { config } = p;
    const values = p.values.values();
    const items = options.map((o, i) => ({ id: p.ids.get(i), value: values[i], dueMs: o.dueMs, idempotencyKey: o.idempotencyKey }));
    const now = this.clock.now();
    const answers = await this.pushes.alone(config.name, () => {
      const sent = enqueueScheduled(this.redis.client, keysOf(config), now, config.idempotencyWindowMs, Math.ceil(p.ttlMs), items);
      this.dispatchers.get(config.name)?.pushed();
      return sent;
    });
    const duplicates: number[] = [];
    let earliest = Infinity;
    const ids = answers.map((first, i) => {
      if (first) {
        duplicates.push(i);
        return first;
      }
      if (items[i].dueMs > now) earliest = Math.min(earliest, items[i].dueMs);
      return items[i].id;
    });
    if (Number.isFinite(earliest)) this.delayed.note(config.name, earliest);
    this.metrics.items(config.name, "enqueued", items.length - duplicates.length);
    return new ScheduledEnqueue(ids, duplicates);
  }

  private async pushNow(p: PreparedEnqueue, wait?: ReplicaWait): Promise<ItemIds | ScheduledEnqueue> {
    if (p.options) {
      if (wait) throw invalid("min_replicas cannot be combined with delayed items or idempotency keys; send them in their own Enqueue", "min_replicas");
      return this.pushScheduled(p, p.options);
    }
    if (!wait) {
      await this.pushes.push(p.config.name, Math.ceil(p.ttlMs), p.values);
      this.metrics.items(p.config.name, "enqueued", p.ids.count);
      return p.ids;
    }
    const acked = await this.pushes.alone(p.config.name, () => this.push(p.config.name, Math.ceil(p.ttlMs), [p.values], wait));
    this.metrics.items(p.config.name, "enqueued", p.ids.count);
    checkReplicas(p.config.name, acked, wait);
    return p.ids;
  }

  /**
   * Pushes items onto a declared queue (LPUSH), resetting its expiry when
   * `ttlMs` > 0 (or the queue declares a publish ttl); with `wait`, answers
   * only once that many replicas have them.
   */
  async enqueue(queue: string, items: readonly NewItem[] | NewItems, ttlMs = 0, wait?: ReplicaWait): Promise<string[]> {
    const out = await this.enqueueIds(queue, items, ttlMs, wait);
    return out instanceof ItemIds ? out.toArray() : out.ids;
  }

  /**
   * enqueue(), resolving to the ids as ItemIds (for callers that write them
   * out, with no string per id), or, when items had a time or an idempotency
   * key, as a ScheduledEnqueue.
   */
  async enqueueIds(queue: string, items: readonly NewItem[] | NewItems, ttlMs = 0, wait?: ReplicaWait): Promise<ItemIds | ScheduledEnqueue> {
    if (wait && (!Number.isInteger(wait.replicas) || wait.replicas < 0 || wait.replicas > MAX_REPLICAS)) {
      throw invalid(`min_replicas must be between 0 and ${MAX_REPLICAS}`, "min_replicas");
    }
    if (wait && (wait.timeoutMs <= 0 || wait.timeoutMs > MAX_REPLICA_WAIT_MS)) {
      throw invalid(`replica_timeout must be more than 0 and at most ${MAX_REPLICA_WAIT_MS / 1000}s`, "replica_timeout");
    }
    const waitFor = wait && wait.replicas > 0 ? wait : undefined;
    return this.prepare(queue, items, ttlMs, (p) => this.write(p, waitFor));
  }

  /** Opens a lease stream on a declared queue; a stream queue's names the consumer group it reads as. */
  async openStream(queue: string, credit: number, sink: LeaseSink, group = ""): Promise<LeaseStream> {
    this.refuseWhileDraining();
    this.checkCredit(credit, true);
    const config = await this.registry.current(queue);
    // A drain that began during the read has closed the streams it found, and may have stopped: a stream
    // added now would lease items no stop closes and no drain notice reaches.
    this.refuseWhileDraining();
    if (config.mode === "stream" && !group) throw invalid(`"${queue}" is a STREAM queue: open names the consumer group to read as`, "open.group");
    if (config.mode !== "stream" && group) throw invalid(`open.group applies to STREAM queues; "${queue}" is ${config.mode.toUpperCase()}`, "open.group");
    if (group && !config.groups.some((g) => g.name === group)) throw groupNotFound(queue, group);
    const stream = new LeaseStream(config, credit, sink, this.clock.now(), group);
    const key = dispatcherKey(queue, group);
    let dispatcher = this.dispatchers.get(key);
    if (!dispatcher) {
      dispatcher = group
        ? new StreamDispatcher(config, this.dispatchHost, group, (n) => this.metrics.items(queue, "dead_lettered", n), (n) => {
          this.metrics.items(queue, "trimmed", n);
          this.log.warn("pending entries were trimmed from the stream before they were settled: they are lost to their group (size the trimming policy above the groups' lag)", {
            queue, group, entries: n,
          });
        })
        : new QueueDispatcher(config, this.dispatchHost);
      this.dispatchers.set(key, dispatcher);
    }
    dispatcher.add(stream);
    this.streams.add(stream);
    this.scheduleHeartbeat(stream);
    return stream;
  }

  private refuseWhileDraining(): void {
    if (this.draining) {
      throw new SwitchyardError("unavailable", "this instance is shutting down; open the lease stream on another instance", { reason: "SHUTTING_DOWN" });
    }
  }

  private checkCredit(credit: number, opening: boolean): void {
    const min = opening ? 1 : 0;
    if (!Number.isInteger(credit) || credit < min || credit > this.options.maxCredit) {
      const max = this.options.maxCredit;
      // The limit is in the error's metadata too, so a client can open again within it (runWorker does).
      throw invalid(`credit must be between ${min} and ${max}`, "credit", { max_credit: String(max) });
    }
  }

  /** Lets a stream take deliveries again once its transport drained (see LeaseSink.backlogged). */
  resume(stream: LeaseStream): void {
    if (!stream.closed) this.dispatcherOf(stream)?.kick();
  }

  /** Changes a stream's credit (max in flight). */
  setCredit(stream: LeaseStream, credit: number): void {
    this.checkCredit(credit, false);
    if (this.draining) return; // a draining stream takes nothing more
    stream.credit = credit;
    this.dispatcherOf(stream)?.kick();
  }

  /**
   * A worker extends by the min_idle it was told when its stream opened. When
   * UpdateQueue lowers the queue's min_idle below that (on a reliable queue with
   * a recovery set), the watchdog would recover a running handler's item before
   * its worker's next extend: so, while the stream lives, this instance extends
   * each held delivery every third of the new min_idle, until the announced
   * min_idle has passed since the worker last claimed it. A stream that ends
   * stops that at once, and an item nobody extends is still recovered.
   */
  private keepAnnouncedMinIdle(stream: LeaseStream): void {
    const lowered = stream.config.mode === "reliable" && stream.config.recoverySet !== "" && stream.config.minIdleMs > 0 &&
      stream.config.minIdleMs < stream.announcedMinIdleMs;
    if (lowered === (stream.claimedMs !== undefined)) return;
    const now = this.clock.now();
    stream.claimedMs = lowered ? new Map([...stream.held.keys()].map((token) => [token, now])) : undefined;
    // The next heartbeat comes sooner (or no longer early).
    stream.heartbeat?.cancel();
    this.scheduleHeartbeat(stream);
  }

  /**
   * Every heartbeat interval: a keep-alive if the stream was idle (SPEC Q12),
   * and a check of the items it holds, so an item settled through another
   * instance stops counting against its credit.
   */
  private scheduleHeartbeat(stream: LeaseStream): void {
    if (stream.closed) return; // closed while its items were checked
    const interval = this.options.heartbeatIntervalMs;
    const keepAlive = stream.claimedMs ? Math.max(1, Math.floor(stream.config.minIdleMs / 3)) : Infinity;
    stream.heartbeat = this.clock.setTimer(Math.min(interval - (this.clock.now() - stream.lastSendMs), keepAlive), async () => {
      if (stream.closed) return;
      const now = this.clock.now();
      if (now - stream.lastSendMs >= interval) {
        stream.lastSendMs = now;
        stream.sink.heartbeat(now);
      }
      await this.forgetSettledElsewhere(stream).then(
        (checked) => {
          if (checked && this.checksFailing.delete(stream.config.name)) this.log.info("lease checks go through again", { queue: stream.config.name });
        },
        (err: unknown) => {
          // Once per queue until one goes through: each stream checks every heartbeat, and a cause (a key
          // another client overwrote, Redis down) fails them all alike. The message alone: a script's
          // error carries its arguments, the whole Lua text after a NOSCRIPT.
          const fields = { queue: stream.config.name, reason: err instanceof Error ? err.message : String(err) };
          if (this.checksFailing.has(stream.config.name)) this.log.debug("lease check failed", fields);
          else this.log.warn("lease check failed; warned once for this queue until a check goes through", fields);
          this.checksFailing.add(stream.config.name);
        },
      );
      this.scheduleHeartbeat(stream);
    });
  }

  /** Checks the items `stream` holds (see scheduleHeartbeat); false if it holds none to check. */
  private async forgetSettledElsewhere(stream: LeaseStream): Promise<boolean> {
    if (stream.config.mode === "simple") return this.forgetReleasedSimple(stream);
    const held = [...stream.held].filter(([, ref]) => ref.owner);
    if (held.length === 0) return false;
    const now = this.clock.now();
    // Claims still within the min_idle the worker was told are extended (keepAnnouncedMinIdle).
    const action = (token: string) => (now - (stream.claimedMs?.get(token) ?? -Infinity) < stream.announcedMinIdleMs ? "extend" : "check");
    const results = await this.settler.settleMany(stream.config, held.map(([token, ref]) => ({ action: action(token), delivery: deliveryField(ref) })));
    held.forEach(([token], i) => {
      if (results[i].code !== "done") this.release(token, stream);
    });
    return true;
  }

  /** Frees the credit of simple deliveries the stream holds that were settled elsewhere and recorded, the announcement missed (see releaseSimple). */
  private async forgetReleasedSimple(stream: LeaseStream): Promise<boolean> {
    const tokens = [...stream.held.keys()];
    if (tokens.length === 0) return false;
    const recorded = await this.redis.client.zmscore(systemKeys(this.options.namespace).recentlyReleased, ...tokens);
    tokens.forEach((token, i) => this.releaseRecorded(token, recorded[i]));
    return true;
  }

  /**
   * Frees a simple delivery found among the recent releases or announced,
   * settled at `settledMs`, if a stream here holds it and took it no later
   * (give or take SETTLE_CLOCK_SLACK_MS, the two clocks' disagreement): a
   * settle made before the pop is not of this delivery (an ack of a token not yet
   * issued, or a token issued again after Redis lost the fence counter's
   * writes), and freeing its credit would let the stream hold more than it
   * asked for.
   */
  private releaseRecorded(token: string, settledMs: string | null): void {
    const ref = this.heldSimple(token);
    if (ref && settledMs !== null && Number(settledMs) + SETTLE_CLOCK_SLACK_MS >= (ref.poppedMs ?? -Infinity)) this.release(token);
  }

  /** The simple delivery a stream here holds under `token`, if any: the released channel and its records free no other. */
  private heldSimple(token: string): LeaseRef | undefined {
    const ref = this.holders.get(token)?.held.get(token);
    return ref && tokenMode(ref) === "simple" ? ref : undefined;
  }

  /**
   * Frees the credit a settled simple delivery held. Its stream may be on another
   * instance, which has no record in Redis to find the settle by (a reliable
   * delivery's heartbeat check reads its record): this instance records it among
   * the recent releases and announces it on the released channel, each with
   * when it was settled. The holder hears it there; if it was not listening then (its pub/sub connection being
   * made again), it finds the record once it listens again (and once its command
   * connection is back, should that come later); if the announcement never came
   * (this instance died after the record), its next heartbeat check finds the
   * record. A record or announcement that fails is made again (see
   * announceReleases). The settle itself is accepted either way (SPEC Q3).
   */
  private releaseSimple(token: string, ownStream?: LeaseStream): void {
    if (ownStream?.held.has(token) || this.holders.has(token)) return this.release(token, ownStream);
    void this.announceReleases([[token, this.clock.now()]]);
  }

  /**
   * Records and announces simple deliveries settled here for streams elsewhere,
   * each with when it was settled (see releaseSimple), in one transaction: once
   * its bytes are out, a crash of this instance loses neither, and an instance
   * that reads the record after it listens again cannot have missed both (on a
   * cluster the announcement reaches other nodes after the record is written).
   * If it fails, the announcements go alone (Redis may refuse the record and
   * serve them: out of memory), and the whole is made again once the command
   * connection is back, and every ANNOUNCE_RETRY_MS until it goes through (a
   * cluster's failover emits no "ready"). Resolves once it has answered.
   */
  private announceReleases(releases: readonly (readonly [string, number])[]): Promise<void> {
    const keys = systemKeys(this.options.namespace);
    const now = this.clock.now();
    const announce = this.redis.client.multi()
      .zadd(keys.recentlyReleased, ...releases.flatMap(([token, settledMs]) => [settledMs, token]))
      .zremrangebyscore(keys.recentlyReleased, "-inf", now - RECENT_RELEASES_MS)
      .zremrangebyrank(keys.recentlyReleased, 0, -RECENT_RELEASES - 1)
      .pexpire(keys.recentlyReleased, RECENT_RELEASES_MS);
    for (const [token, settledMs] of releases) announce.publish(keys.released, releasedMessage(token, settledMs));
    return execAll(announce).then(
      () => {
        if (this.announceFailing && this.unannounced.size === 0) this.log.info("recorded the simple deliveries settled here for streams on other instances");
        this.announceFailing = this.unannounced.size > 0;
      },
      (err: unknown) => {
        for (const [token, settledMs] of releases) this.redis.client.publish(keys.released, releasedMessage(token, settledMs)).catch(() => undefined);
        if (!this.announceFailing) {
          this.log.warn("could not record simple deliveries settled here for streams on other instances; trying again", { releases: releases.length, err });
        }
        this.announceFailing = true;
        for (const [token, settledMs] of releases) {
          this.unannounced.delete(token); // to the end: the oldest are let go first when there are too many
          this.unannounced.set(token, settledMs);
        }
        for (const token of this.unannounced.keys()) {
          if (this.unannounced.size <= RECENT_RELEASES) break;
          this.unannounced.delete(token);
        }
        this.announceTimer ??= this.clock.setTimer(ANNOUNCE_RETRY_MS, () => {
          this.announceTimer = undefined;
          void this.announceAgain();
        });
      },
    );
  }

  /** Records and announces again the releases whose announcement failed (see announceReleases). */
  private announceAgain(): Promise<void> {
    if (this.unannounced.size === 0) return Promise.resolve();
    const releases = [...this.unannounced];
    this.unannounced.clear();
    return this.announceReleases(releases);
  }

  /**
   * An announcement on the released channel (see releaseSimple). It may reach
   * this instance after a pop that issued its token (an ack of a token not
   * yet issued, announced late): like a record, it frees only a delivery
   * taken no later than it was settled. An instance from before settle times
   * were announced sends the token alone.
   */
  private readonly onReleased = (message: string) => {
    const at = message.indexOf(" ");
    if (at < 0) {
      if (this.heldSimple(message)) this.release(message);
    }
    else this.releaseRecorded(message.slice(0, at), message.slice(at + 1));
  };

  /** The released channel listens again after its connection was lost: frees what was announced meanwhile (see releaseSimple). */
  private readonly onReleasesMissed = () => {
    if (!this.redis.ready()) return; // read once the command connection is back (onReconnect)
    this.redis.client.zrange(systemKeys(this.options.namespace).recentlyReleased, 0, -1, "WITHSCORES").then(
      (flat) => {
        for (let i = 0; i < flat.length; i += 2) this.releaseRecorded(flat[i], flat[i + 1]);
      },
      (err: unknown) => this.log.warn("could not read the recent releases of simple deliveries; streams may hold credit for some settled elsewhere", { err }),
    );
  };

  /** Marks a delivery as no longer held by its stream (nor settling), freeing its unit of credit. */
  private release(token: string, ownStream?: LeaseStream): void {
    const stream = ownStream?.held.has(token) || ownStream?.settling.has(token) ? ownStream : this.holders.get(token);
    if (!stream) return;
    const held = stream.held.delete(token);
    if (!held && !stream.settling.delete(token)) return;
    this.holders.delete(token);
    stream.claimedMs?.delete(token);
    if (held) this.dispatcherOf(stream)?.kick();
    this.onRelease?.();
  }

  /**
   * Settles that free their delivery (ack, retry, drop) of a reliable queue,
   * about to go to Redis in one call with the lease their credit pays for
   * (settle-lease.lua, see Settler): each delivery a stream here holds moves to
   * its `settling`, so the lease can count that credit free. Its holder entry
   * stays (reconcile never takes it for nobody's) until the answer releases it;
   * `unsettled` if no answer came, `heldAgain` if the lease does not go. Only
   * settles in that very call may free credit early: a settle sent without the
   * lease could be refused after the pump leased for its credit on its own.
   * A STREAM queue's lease reads as one group: only deliveries of the group
   * of the first one move. Resolves to the tokens moved, and that group.
   */
  private settling(config: QueueConfig, ops: readonly SettleOp[]): { freed: string[]; group: string } {
    const freed: string[] = [];
    let group: string | undefined;
    for (const op of ops) {
      if (op.action !== "ack" && op.action !== "retry" && op.action !== "drop" || op.token === undefined) continue;
      const t = op.token;
      const stream = this.holders.get(t);
      const ref = stream?.held.get(t);
      if (!stream || !ref || stream.queue !== config.name || (group ??= stream.group) !== stream.group) continue;
      stream.held.delete(t);
      stream.settling.set(t, ref);
      freed.push(t);
    }
    return { freed, group: group ?? "" };
  }

  /** Deliveries `settling` moved, held again: the lease they were to pay for does not go with them. */
  private heldAgain(tokens: readonly string[]): void {
    for (const t of tokens) {
      const stream = this.holders.get(t);
      const ref = stream?.settling.get(t);
      if (!stream || !ref) continue;
      stream.settling.delete(t);
      stream.held.set(t, ref);
    }
  }

  /**
   * A settle whose outcome is unknown (Redis could not be asked): its delivery
   * is held again, as before it was sent; if its stream has closed meanwhile,
   * it goes back to the queue as the stream's other items did.
   */
  private unsettled(token: string): void {
    const stream = this.holders.get(token);
    const ref = stream?.settling.get(token);
    if (!stream || !ref) return;
    stream.settling.delete(token);
    if (!stream.closed) {
      stream.held.set(token, ref);
      return;
    }
    this.holders.delete(token);
    void this.returns.give(stream.config, fieldsOf([ref]), "return");
    this.onRelease?.();
  }

  /**
   * A settle whose call failed (a timeout, a lost connection) may still have
   * applied, its answer lost: if its delivery is still held here, look now
   * rather than at the stream's next heartbeat, so a stream at credit 1 is not
   * stalled by an ack that did apply. If Redis still cannot be asked, the
   * heartbeat's check looks again.
   */
  private recheck(token: string): void {
    const stream = this.holders.get(token);
    const ref = stream?.held.get(token);
    if (!stream || !ref) return;
    this.settler.settle(stream.config, { action: "check", delivery: deliveryField(ref) }).then(
      (r) => {
        if (r.code !== "done") this.release(token, stream);
      },
      // Not asked (the connection is being made again, say): once it is ready (onReconnect).
      () => void this.rechecks.add(token),
    );
  }

  /**
   * Ends a stream: its unsettled reliable items go back to the front of the
   * queue at once (counted as a delivery), without waiting for min_idle. If
   * Redis cannot take them now, they are tried again until it can.
   */
  async closeStream(stream: LeaseStream): Promise<void> {
    if (stream.closed) return;
    stream.closed = true;
    stream.heartbeat?.cancel();
    this.streams.delete(stream);
    // Its queue's failing checks are warned of again should they fail after a new stream opens.
    if (this.checksFailing.has(stream.queue) && ![...this.streams].some((s) => s.queue === stream.queue)) this.checksFailing.delete(stream.queue);
    this.dispatcherOf(stream)?.remove(stream);
    const held = [...stream.held.values()];
    // On their way back before they stop counting as held: the pump's reconcile must never see them as nobody's.
    const returning = this.returns.give(stream.config, fieldsOf(held.reverse()), "return");
    for (const token of stream.held.keys()) this.holders.delete(token);
    stream.held.clear();
    // Each return goes to the front: the last delivered went first (reversed above), so the queue keeps its order.
    await returning;
    // A stream queue's entries handed back wait to be reclaimed: the group's pump takes them now.
    if (stream.group && held.length > 0) this.handedBack(stream.queue, stream.group, held);
  }

  /**
   * Gives back deliveries `stream` holds that its worker never started (fetched
   * ahead of its handlers): to the front of their queue in delivery order,
   * uncounted, at once; their credit is free again. Resolves to the tokens
   * refused, each with why: a malformed one (INVALID_ARGUMENT), one the stream
   * does not hold (settled, recovered, another stream's, or with its settle on
   * the way). If Redis cannot take them now, they are tried again until it can,
   * as a closed stream's are; except a SIMPLE queue's: its items left Redis when
   * they were popped, and are pushed back once (at most once: a push Redis
   * refuses loses them, and says so).
   */
  async releaseUnstarted(tokens: readonly string[], stream: LeaseStream): Promise<SettleFailure[]> {
    const failures: SettleFailure[] = [];
    const asked = new Set(tokens);
    // In delivery order (the order the stream took them), whatever order the worker named them in.
    const given = [...stream.held].filter(([token]) => asked.has(token));
    for (const [token] of given) asked.delete(token);
    for (const token of asked) {
      // A malformed token is the worker's bug, told as an ack of it would be (INVALID_ARGUMENT, LEASE_TOKEN_INVALID).
      try {
        parseToken(token);
      } catch (error) {
        failures.push({ token, error });
        continue;
      }
      const why = "this stream does not hold it: it was settled, recovered, or leased on another stream";
      failures.push({ token, error: new SwitchyardError("failed_precondition", `cannot release: ${why}`, { reason: "LEASE_NOT_HELD", metadata: { queue: stream.queue } }) });
    }
    if (given.length === 0) return failures;
    if (stream.config.mode === "simple") {
      // The push goes out before the freed credit's lease, on the same connection: Redis runs it first.
      const back = pushBackPopped(this.redis.client, stream.queue, given.flatMap(([, ref]) => ref.popped ?? []), this.log);
      this.dispatcherOf(stream)?.pushed();
      for (const [token] of given) this.release(token, stream);
      await back;
      return failures;
    }
    // Each goes to the front: the last delivered first, so the queue keeps its order (as closeStream).
    // On their way back before they stop counting as held: the pump's reconcile must never see them as nobody's.
    const back = given.filter(([, ref]) => ref.owner).reverse();
    const returning = this.returns.give(stream.config, fieldsOf(back.map(([, ref]) => ref)), "undo");
    for (const [token] of given) this.release(token, stream);
    // One settled meanwhile (its ack sent just before, or made through another instance) changed nothing: say so.
    // (Undefined: Redis could not be asked; they are given back as soon as it can.)
    const results = await returning;
    results?.forEach(({ code }, i) => {
      if (code !== "done") failures.push({ token: back[i][0], error: settleError(code, "release", back[i][1]) });
    });
    if (stream.group) this.handedBack(stream.queue, stream.group, back.map(([, ref]) => ref));
    return failures;
  }

  /** The declaration a token's queue has now, refusing a token of the other mode. */
  private async configFor(ref: LeaseRef, action: WorkerSettle): Promise<QueueConfig> {
    const config = await this.registry.get(ref.queue);
    if (config.mode !== tokenMode(ref)) {
      throw new SwitchyardError(
        "failed_precondition",
        `cannot ${action}: the lease token names a delivery of a ${tokenMode(ref).toUpperCase()} queue, ` +
          `but "${ref.queue}" is ${config.mode.toUpperCase()} now (it was declared again); the delivery is gone`,
        { reason: "LEASE_NOT_HELD", metadata: { queue: ref.queue } },
      );
    }
    return config;
  }

  /**
   * Settles the delivery a token names. Simple queues accept and change
   * nothing (the item left Redis when it was popped).
   */
  async settle(token: string, action: WorkerSettle, opts: SettleOptions = {}, fromStream?: LeaseStream): Promise<SettleOutcome> {
    const ref = parseToken(token);
    const config = await this.configFor(ref, action);
    const frees = action !== "extend" && action !== "check";
    if (config.mode === "simple") {
      if (frees) this.releaseSimple(token, fromStream);
      if (action === "ack" || action === "drop") this.metrics.items(config.name, action === "ack" ? "acked" : "dropped");
      return { deadLettered: false };
    }
    if (opts.delayMs !== undefined && (!Number.isFinite(opts.delayMs) || opts.delayMs < 0)) throw invalid("delay must not be negative", "delay");
    if (opts.delayMs !== undefined && opts.delayMs > MAX_SCHEDULE_MS) throw invalid("delay is more than 10 years (an Enqueue's delay is held to the same)", "delay");
    const op: SettleOp = { action, delivery: deliveryField(ref), reason: cutReason(opts.reason), delayMs: opts.delayMs, token };
    let result: SettleResult;
    try {
      result = await this.settler.settle(config, op);
    } catch (err) {
      if (frees) {
        this.unsettled(token);
        this.recheck(token);
      }
      throw err;
    }
    if (frees || result.code !== "done") this.release(token, fromStream);
    if (result.code !== "done" && result.code !== "dead_lettered") throw settleError(result.code, action, ref);
    // The worker claimed it again: its announced min_idle runs from now (keepAnnouncedMinIdle).
    if (action === "extend") this.holders.get(token)?.claimedMs?.set(token, this.clock.now());
    if (action === "drop" && opts.reason) this.log.info("item dropped", { queue: config.name, fence: ref.fence, reason: op.reason });
    if (action === "retry" && config.mode === "reliable" && result.dueMs > 0) this.delayed.note(config.name, result.dueMs);
    // A stream entry retried waits to be reclaimed: this instance's pump of its group looks at once.
    if (action === "retry" && ref.entry) this.handedBack(config.name, ref.entry.group, [ref]);
    return {
      deadLettered: result.code === "dead_lettered",
      expireTimeMs: action === "extend" && (config.recoverySet || config.mode === "stream") ? this.clock.now() + config.minIdleMs : undefined,
      dueMs: action === "retry" && result.code === "done" ? result.dueMs || this.clock.now() : undefined,
    };
  }

  /**
   * Acknowledges deliveries (no replies) as `settle(token, "ack")` would each,
   * with one settle call per queue for all of them. Resolves to the tokens
   * that failed, each with its own error; rejects only when Redis could not
   * be asked (then none of them is known to have applied). A token given
   * twice is acked once and reported once.
   */
  async ackMany(tokens: readonly string[], fromStream?: LeaseStream): Promise<SettleFailure[]> {
    const failures: SettleFailure[] = [];
    const byQueue = new Map<string, { token: string; ref: LeaseRef }[]>();
    for (const token of new Set(tokens)) {
      let ref: LeaseRef;
      try {
        // A delivery a stream here holds has its ref at hand: what parsing its token would give.
        ref = this.holders.get(token)?.held.get(token) ?? parseToken(token);
      } catch (error) {
        failures.push({ token, error });
        continue;
      }
      let group = byQueue.get(ref.queue);
      if (!group) byQueue.set(ref.queue, (group = []));
      group.push({ token, ref });
    }
    await Promise.all([...byQueue].map(async ([, group]) => {
      let config: QueueConfig;
      try {
        config = await this.registry.get(group[0].ref.queue);
      } catch (error) {
        for (const { token } of group) failures.push({ token, error });
        return;
      }
      const settles: typeof group = [];
      let popped = 0;
      for (const g of group) {
        if (config.mode !== tokenMode(g.ref)) {
          failures.push({ token: g.token, error: await this.configFor(g.ref, "ack").then(() => undefined, (e: unknown) => e) });
        } else if (config.mode !== "simple") {
          settles.push(g);
        } else {
          // A simple queue's item left Redis when it was popped: nothing to settle.
          this.releaseSimple(g.token, fromStream);
          popped++;
        }
      }
      if (popped > 0) this.metrics.items(config.name, "acked", popped);
      let results: SettleResult[];
      try {
        results = await this.settler.settleMany(config, settles.map(({ token, ref }) => ({ action: "ack", delivery: deliveryField(ref), token })));
      } catch (err) {
        for (const { token } of settles) {
          this.unsettled(token);
          this.recheck(token);
        }
        throw err;
      }
      settles.forEach(({ token, ref }, i) => {
        this.release(token, fromStream);
        const { code } = results[i];
        if (code !== "done") failures.push({ token, error: settleError(code, "ack", ref) });
      });
    }));
    return failures;
  }

  /**
   * Acknowledges a delivery. Replies are enqueued after the lease is checked
   * and before the ack, so a crash in between repeats the replies rather than
   * losing them (at least once). Without a reply queue, replies go to the
   * queue's standing reply route (Queue.reply_queue); `reply.mayEnqueue`
   * refuses (throws) a route the caller may not enqueue onto, before anything is written.
   */
  async ack(token: string, reply?: AckReply, fromStream?: LeaseStream): Promise<string[]> {
    if (!reply || reply.items.length === 0) {
      await this.settle(token, "ack", {}, fromStream);
      return [];
    }
    const ref = parseToken(token);
    // A SIMPLE delivery's ack changes nothing in Redis: its stream stops holding it at once, so a release
    // sent behind this ack finds it settled (LEASE_NOT_HELD) rather than pushing the item back to run again.
    const simple = tokenMode(ref) === "simple";
    if (simple) this.releaseSimple(token, fromStream);
    const route = reply.queue || (await this.registry.get(ref.queue)).replyQueue;
    if (!route) throw invalid("reply_queue is required with replies (the queue declares no reply_queue)", "reply_queue");
    reply.mayEnqueue?.(route);
    const written = await this.prepare(route, reply.items, reply.ttlMs, async (prepared) => {
      await this.settle(token, "check", {}, fromStream);
      return this.write(prepared);
    });
    if (simple) this.metrics.items(ref.queue, "acked");
    else await this.settle(token, "ack", {}, fromStream);
    return written instanceof ItemIds ? written.toArray() : written.ids;
  }

  /** Items of a declared queue's ready, dead-letter or delayed list, next to leave first, without moving them. */
  async peek(name: string, list: PeekList, limit: number): Promise<{ items: PeekedItem[]; total: number }> {
    const config = await this.registry.get(name);
    if (list !== "dead_letter") {
      const refused = notOnStreams(config, `PeekQueue of the ${list} list`);
      if (refused) throw refused;
    }
    return peekItems(this.redis.client, config, list, limit);
  }

  /**
   * Pushes onto `queue`; a pump of this instance with credit leases in the same call, or right
   * behind it (QueueDispatcher.push).
   * A push that waits for replicas goes on the waiter connection (WAIT blocks the
   * connection it is sent on); its queue's order holds, as nothing else to the queue is
   * in flight meanwhile (PushBatcher.alone), and the pump's wake-up finds its items.
   */
  private push(queue: string, ttlMs: number, values: BulkStrings[], wait?: ReplicaWait): Promise<number> {
    if (wait) {
      const replyMs = this.redis.commandTimeoutMs;
      return this.redis.waiter().then((waiter) => pushItems(waiter, queue, ttlMs, values, { ...wait, replyMs }));
    }
    const dispatcher = this.dispatchers.get(queue);
    return dispatcher ? dispatcher.push(ttlMs, values) : pushItems(this.redis.client, queue, ttlMs, values);
  }

  /** Deletes the items waiting in a declared queue (ready and delayed); resolves to how many. */
  async purge(name: string): Promise<number> {
    const config = await this.registry.get(name);
    const refused = notOnStreams(config, "PurgeQueue");
    if (refused) throw refused;
    return purgeReady(this.redis.client, config);
  }

  /** Requeues or deletes dead letters of a declared reliable queue; resolves to how many. */
  async settleDeadLetters(name: string, action: DeadLetterAction, selection: DeadLetterSelection): Promise<number> {
    const config = await this.registry.get(name);
    const n = await settleDeadLetterSelection(this.redis.client, config, action, selection);
    if (action === "requeue" && n > 0) this.wakeStreams(name);
    return n;
  }

  /** Depth, processing, dead letters and oldest claim age of a declared queue. */
  async stats(name: string): Promise<QueueStatsView> {
    const config = await this.registry.get(name);
    const { client } = this.redis;
    const keys = keysOf(config);
    const leaseStreams = this.dispatchersOf(name).reduce((n, d) => n + d.streamCount, 0);
    // A key replaced by a value of another type (a stray write by another client) is named, not an INTERNAL error.
    const read = <T>(key: string, type: string, value: Promise<T>) => value.catch((err: Error) => Promise.reject(keyOfType(key, type, err)));
    if (config.mode === "stream") {
      const [entries, deadLetter, leased, completed, groups] = await Promise.all([
        client.xlen(keys.queue).catch((err: Error) => Promise.reject(wrongType(keys.queue, err))),
        read(keys.deadLetter, "list", client.llen(keys.deadLetter)),
        read(keys.fence, "string", client.get(keys.fence)),
        read(keys.leases, "hash", client.hget(keys.leases, "completed")),
        groupStats(client, keys.queue),
      ]);
      return {
        queue: name, ready: entries, processing: groups.reduce((n, g) => n + g.pending, 0), deadLetter,
        oldestClaimAgeMs: undefined, leaseStreams, leased: Number(leased ?? 0), completed: Number(completed ?? 0), delayed: 0,
        paused: config.paused, groups,
      };
    }
    const reliable = config.mode === "reliable";
    const [ready, processing, deadLetter, oldest, leased, completed, delayed] = await Promise.all([
      read(keys.queue, "list", client.llen(keys.queue)),
      reliable ? read(keys.processing, "list", client.llen(keys.processing)) : 0,
      reliable ? read(keys.deadLetter, "list", client.llen(keys.deadLetter)) : 0,
      config.recoverySet ? read(config.recoverySet, "sorted set", client.zrange(config.recoverySet, 0, 0, "WITHSCORES")) : [],
      read(keys.fence, "string", client.get(keys.fence)),
      reliable ? read(keys.leases, "hash", client.hget(keys.leases, "completed")) : null,
      read(keys.delayed, "sorted set", client.zcard(keys.delayed)),
    ]);
    return {
      queue: name,
      ready,
      processing,
      deadLetter,
      oldestClaimAgeMs: oldest.length === 2 ? Math.max(0, this.clock.now() - Number(oldest[1])) : undefined,
      leaseStreams,
      leased: Number(leased ?? 0),
      completed: Number((reliable ? completed : leased) ?? 0),
      delayed,
      paused: config.paused,
      groups: [],
    };
  }
}
