/**
 * The declared queues: stored in one Redis hash, cached on each instance and
 * kept fresh through a pub/sub channel, so a declaration made through any
 * instance is usable on every other one. A second hash records which queue
 * owns each key; declare.lua writes both at once, so no two queues ever share
 * a key, however their declarations race.
 */
import { randomBytes } from "node:crypto";
import { invalid, SwitchyardError } from "../errors.js";
import type { Clock, Timer } from "../clock.js";
import type { Logger } from "../log.js";
import { isConnectionError, type RedisConnection } from "../redis/connection.js";
import { allKeys, type SystemKeys } from "../redis/keys.js";
import { declareQueue, readDeclaration, readDeclarations, rebaseParked, restoreGroups, undeclareQueue } from "../redis/scripts.js";
import { ensureGroups } from "./stream/entries.js";
import {
  keysOf, normalizeConfig, sameDeclaration, shapeOf, validateQueueSpec, type QueueConfig, type QueueSpec,
} from "./declaration.js";

/** A page of declarations. */
export interface QueuePage {
  queues: QueueConfig[];
  nextPageToken: string;
}

/** The Redis types a queue's keys may hold (or none). */
function expectedTypes(config: QueueConfig): Map<string, string> {
  const keys = keysOf(config);
  const types = new Map<string, string>([
    [keys.queue, config.mode === "stream" ? "stream" : "list"], [keys.fence, "string"], [keys.delayed, "zset"],
    [keys.idempotency, "hash"], [keys.idempotencyTime, "zset"],
  ]);
  if (config.mode === "stream") {
    types.set(keys.deadLetter, "list");
    types.set(keys.leases, "hash");
  }
  if (config.mode === "reliable") {
    for (const k of [keys.processing, keys.deadLetter]) types.set(k, "list");
    for (const k of [keys.returned, keys.recovery]) if (k) types.set(k, "zset");
    types.set(keys.leases, "hash");
  }
  return types;
}

/** How many versions of changes an instance remembers having heard of (see applyChange). */
const SEEN_VERSIONS = 1000;
/** How long after a failed full read of the declarations the next is tried. */
const RELOAD_RETRY_MS = 1000;

/** True when `next` is not a change of `old` but a declaration made anew since (or, were Redis to lose it, one of another shape). */
function replaces(next: QueueConfig, old: QueueConfig): boolean {
  if (shapeOf(next) !== shapeOf(old)) return true;
  // "": stored before incarnations were kept, or changed since by an instance of that version,
  // which drops the field but keeps the create time. The create time tells those apart.
  return next.incarnation && old.incarnation ? next.incarnation !== old.incarnation : next.createTimeMs !== old.createTimeMs;
}

/** Parses a stored declaration. */
function parse(json: string): QueueConfig {
  return normalizeConfig(JSON.parse(json) as QueueConfig);
}

export class QueueRegistry {
  private cache = new Map<string, QueueConfig>();
  /** Reads from Redis of declarations not in the cache, by name, while they are out. */
  private readonly loading = new Map<string, Promise<QueueConfig>>();
  private unsubscribe?: () => void;
  /**
   * Queue name → the version of the last change this instance applied (see
   * undeclare.lua), and `seq` when it did (see reload()).
   */
  private readonly applied = new Map<string, { version: number; seq: number }>();
  /** How many changes this instance has applied. */
  private seq = 0;
  /** The version counter as the last full read of the declarations found it: every change up to it is in the cache. */
  private readVersion = 0;
  /** The next try of a full read that failed (see readAll). */
  private retry?: Timer;
  /** Full reads failed in a row: the first is a warning, the rest only debug lines until one succeeds. */
  private failedReads = 0;
  /** A full read is out, and another is to follow it (see readAll). */
  private reloading = false;
  private reloadAgain = false;
  private stopped = false;
  /** The versions of the latest changes this instance has heard of, as answers or events (see applyChange). */
  private readonly seen = new Set<number>();
  private readonly deletedListeners: ((name: string) => void)[] = [];
  private readonly changedListeners: ((config: QueueConfig) => void)[] = [];

  constructor(
    private readonly redis: RedisConnection,
    private readonly keys: SystemKeys,
    private readonly clock: Clock,
    private readonly log: Logger,
    /** Switchyard's own hash tag, which no queue key may carry. */
    readonly namespace = "switchyard",
  ) {}

  /**
   * Loads every declaration and follows changes made by other instances; after
   * each reconnect to Redis (the command connection or the pub/sub one) it loads
   * them again, since change events may have been missed and a restarted Redis
   * may have lost declarations.
   */
  async start(): Promise<void> {
    this.unsubscribe = await this.redis.subscribe(this.keys.events, (message) => this.onEvent(message), this.onReconnect);
    await this.reload();
    await this.recordOwnership();
    this.redis.client.on("ready", this.onReconnect);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.retry?.cancel();
    this.unsubscribe?.();
    this.redis.client.off("ready", this.onReconnect);
  }

  private readonly onReconnect = () => this.readAll();

  /**
   * Reads every declaration again (reload()): one read at a time, and one more after
   * it if asked meanwhile. A read that fails (Redis unreachable, or its slot moving) is
   * tried again every RELOAD_RETRY_MS until one succeeds, since what it was to find
   * (changes missed while this instance did not listen) no event will tell. The
   * first failure of a run is logged as a warning and the run's end as info: a
   * Redis down for minutes would otherwise put a warning in the log every second.
   */
  private readAll(): void {
    if (this.stopped) return;
    if (this.reloading) {
      this.reloadAgain = true;
      return;
    }
    this.reloading = true;
    this.retry?.cancel();
    this.retry = undefined;
    this.reload()
      .then(
        () => {
          if (this.failedReads > 0) this.log.info("read the queue declarations again", { failedReads: this.failedReads });
          this.failedReads = 0;
        },
        (err: unknown) => {
          const fields = { err, inMs: RELOAD_RETRY_MS, failedReads: ++this.failedReads };
          if (this.failedReads === 1) this.log.warn("could not read the queue declarations again; trying again until it succeeds", fields);
          else this.log.debug("could not read the queue declarations again; trying again", fields);
          if (!this.stopped) this.retry = this.clock.setTimer(RELOAD_RETRY_MS, () => this.readAll());
        },
      )
      .finally(() => {
        this.reloading = false;
        if (!this.reloadAgain) return;
        this.reloadAgain = false;
        this.readAll();
      });
  }

  /** Records key ownership for declarations stored before it was kept (HSETNX: an owner recorded stays). */
  private async recordOwnership(): Promise<void> {
    for (const config of this.cache.values()) {
      for (const key of allKeys(keysOf(config))) await this.redis.client.hsetnx(this.keys.queueKeys, key, config.name);
    }
  }

  /**
   * Replaces the cache with what Redis holds; declarations gone from Redis count
   * as deleted, and so do those declared again since (another incarnation: see
   * put()). The read comes with the version counter, since its answer may reach
   * this instance after change events that came on the pub/sub connection
   * meanwhile: a queue changed by such an event newer than the read keeps what
   * the event said, and events the read includes are old news when they come
   * later. A counter below a version applied before the read went out means Redis
   * lost changes (restarted empty, or from an older snapshot): what it holds now
   * is the truth, and those versions are forgotten.
   */
  private async reload(): Promise<void> {
    const since = this.seq;
    const { version: read, all } = await readDeclarations(this.redis.client, this.keys);
    for (const [name, a] of this.applied) if (a.seq <= since && a.version > read) this.applied.delete(name);
    this.readVersion = read;
    const fresh = new Map<string, QueueConfig>();
    for (const name of new Set([...this.cache.keys(), ...all.keys()])) {
      const stored = all.get(name);
      const config = this.changedSince(name, since, read) ? this.cache.get(name) : stored !== undefined ? this.readable(name, stored) : undefined;
      if (config) fresh.set(name, config);
    }
    const gone = [...this.cache].filter(([name, old]) => !fresh.has(name) || replaces(fresh.get(name)!, old)).map(([name]) => name);
    const changed = [...fresh.values()].filter((c) => {
      const old = this.cache.get(c.name);
      return old && !replaces(c, old) && (!sameDeclaration(old, c) || old.paused !== c.paused);
    });
    this.cache = fresh;
    for (const name of gone) for (const fn of this.deletedListeners) fn(name);
    for (const config of changed) for (const fn of this.changedListeners) fn(config);
  }

  /** `stored` parsed; a declaration that does not parse (written by hand, say) is logged and the cached one kept, so it holds up no other. */
  private readable(name: string, stored: string): QueueConfig | undefined {
    try {
      return this.reuse(parse(stored));
    } catch (err) {
      this.log.warn("ignored a stored queue declaration that does not parse", { queue: name, err });
      return this.cache.get(name);
    }
  }

  /** True when this instance applied a change of `name` newer than a read that found the counter at `read`, after the read went out (at `since`). */
  private changedSince(name: string, since: number, read: number): boolean {
    const a = this.applied.get(name);
    return a !== undefined && a.seq > since && a.version > read;
  }

  /** Calls `fn` with the name of every queue deleted, through any instance. */
  onDeleted(fn: (name: string) => void): void {
    this.deletedListeners.push(fn);
  }

  /** Calls `fn` with every declaration that changed (UpdateQueue, PauseQueue, a config file), through any instance. */
  onChanged(fn: (config: QueueConfig) => void): void {
    this.changedListeners.push(fn);
  }

  private onEvent(message: string): void {
    try {
      const event = JSON.parse(message) as { op: "put" | "delete"; name: string; version?: number; config?: QueueConfig };
      const apply = () => {
        if (event.op === "put" && event.config) this.put(normalizeConfig(event.config));
        // (A delete made here was told to the listeners already, and left the cache then.)
        if (event.op === "delete") this.deleted(event.name);
      };
      if (event.version === undefined) apply();
      else this.applyChange(event.name, event.version, apply);
    } catch (err) {
      this.log.warn("ignored a malformed queue event", { err });
    }
  }

  /**
   * Applies change `version` of queue `name` with `fn` if it is news. One seen
   * here already (an instance's own change comes as its answer and as its event,
   * in either order) is done with. Any other that is not news is old news after
   * a read that raced it, or Redis's counter went back with no connection lost
   * (FLUSHALL: the versions known here mean nothing): every declaration is read
   * again, which is right in both cases.
   */
  private applyChange(name: string, version: number, fn: () => void): void {
    const seen = this.seen.has(version);
    this.seen.add(version);
    if (this.seen.size > SEEN_VERSIONS) this.seen.delete(this.seen.values().next().value!);
    if (this.newer(name, version)) return fn();
    if (!seen) this.readAll();
  }

  private deleted(name: string): void {
    if (this.cache.delete(name)) for (const fn of this.deletedListeners) fn(name);
  }

  /** Records change `version` of queue `name`; false when a later one was applied already, or a full read included it. */
  private newer(name: string, version: number): boolean {
    if (version <= this.readVersion || version <= (this.applied.get(name)?.version ?? 0)) return false;
    this.applied.set(name, { version, seq: ++this.seq });
    return true;
  }

  /**
   * Caches `config`. A cached declaration of another incarnation (the queue was
   * deleted and declared again since, by a change this instance missed or has not
   * heard of yet) is told to the listeners as deleted first: what was open on it
   * ends, and never goes on under the new one.
   */
  private put(config: QueueConfig): void {
    const old = this.cache.get(config.name);
    const replaced = old !== undefined && replaces(config, old);
    if (replaced) this.deleted(config.name);
    this.cache.set(config.name, config);
    if (old && !replaced && (!sameDeclaration(old, config) || old.paused !== config.paused)) for (const fn of this.changedListeners) fn(config);
  }

  /** Every declaration this instance knows of (the cache; fresh within a pub/sub round trip). */
  known(): QueueConfig[] {
    return [...this.cache.values()];
  }

  /** The declaration of `name` as this instance knows it now, or undefined. */
  cached(name: string): QueueConfig | undefined {
    return this.cache.get(name);
  }

  /**
   * The declaration of `name` when get() would answer it from the cache, with
   * no read of it out nor its callers still to go on (they go on first): a
   * caller that has it needs no promise turn. Undefined otherwise: await get().
   */
  ready(name: string): QueueConfig | undefined {
    return this.loading.has(name) ? undefined : this.cache.get(name);
  }

  /** The declaration of `name`, or NOT_FOUND. */
  get(name: string): Promise<QueueConfig> {
    // While a read of `name` is out, later calls wait for it too, even once the cache holds the
    // name (a change event may fill it first): callers then go on in call order, so an
    // EnqueueStream's requests to a queue reach the push in the order they came. The read is
    // forgotten only after every reaction queued when it answered has run (its first reaction
    // queues the forgetting behind them): until then a call, even one made by such a reaction,
    // waits for it too and goes on after its callers, not at once (ready()).
    const loading = this.loading.get(name);
    if (loading) return loading;
    const cached = this.cache.get(name);
    if (cached) return Promise.resolve(cached);
    const load = this.load(name);
    const forget = () =>
      queueMicrotask(() => {
        if (this.loading.get(name) === load) this.loading.delete(name);
      });
    load.then(forget, forget);
    this.loading.set(name, load);
    return load;
  }

  /**
   * The declaration of `name` as Redis holds it now, rather than as the cache has
   * it: change events made through other instances may still be on their way.
   * A Lease stream opened after a DeleteQueue and CreateQueue made elsewhere opens
   * on the new declaration, and those events are old news when they come (the
   * late delete ended such a stream: the model tests at 50 × 150 steps, seed 346).
   */
  current(name: string): Promise<QueueConfig> {
    return this.load(name).catch((err: unknown) => {
      // Redis cannot be read now (unreachable, or its slot moving): the cached declaration.
      const cached = this.cache.get(name);
      if (cached && isConnectionError(err)) return cached;
      throw err;
    });
  }

  /**
   * Reads one declaration into the cache; as in reload(), a change event newer than
   * the read (come while it was out) wins, and events the read includes are old news.
   * A cached declaration the read finds deleted since (and perhaps declared again:
   * see put()) is told to the listeners as the delete's event would have told them.
   */
  private async load(name: string): Promise<QueueConfig> {
    if (name === "") throw invalid("queue is required: the name of a declared queue", "queue");
    const since = this.seq;
    const { version: read, stored } = await readDeclaration(this.redis.client, this.keys, name);
    const newer = this.changedSince(name, since, read);
    const config = newer ? this.cache.get(name) : stored === null ? undefined : this.reuse(parse(stored));
    if (!newer) {
      if (stored === null) this.deleted(name);
      if (read > Math.max(this.applied.get(name)?.version ?? 0, this.readVersion)) this.applied.set(name, { version: read, seq: ++this.seq });
    }
    if (!config) {
      throw new SwitchyardError("not_found", `queue "${name}" is not declared; declare it with CreateQueue or in the config file`, {
        reason: "QUEUE_NOT_FOUND",
        metadata: { queue: name },
      });
    }
    this.put(config);
    return config;
  }

  /**
   * The cached declaration of `config`'s name when it says the same, else `config`:
   * every Lease open reads its declaration, and streams of one queue then share one
   * object, and the keys built for it (keysOf), rather than each building its own.
   */
  private reuse(config: QueueConfig): QueueConfig {
    const cached = this.cache.get(config.name);
    const same = cached && cached.incarnation === config.incarnation && cached.createTimeMs === config.createTimeMs &&
      cached.paused === config.paused && sameDeclaration(cached, config);
    return same ? cached : config;
  }

  /** Declarations in name order, a page at a time. */
  async list(pageSize: number, pageToken: string): Promise<QueuePage> {
    const size = pageSize <= 0 ? 100 : Math.min(pageSize, 1000);
    const names = (await this.redis.client.hkeys(this.keys.queues)).sort();
    const after = pageToken ? Buffer.from(pageToken, "base64url").toString() : "";
    const start = after ? names.findIndex((n) => n > after) : 0;
    const page = start < 0 ? [] : names.slice(start, start + size);
    const queues = await Promise.all(page.map((n) => this.get(n)));
    const more = start >= 0 && start + size < names.length;
    return { queues, nextPageToken: more ? Buffer.from(page[page.length - 1]).toString("base64url") : "" };
  }

  /** Refuses a declaration whose keys exist in Redis holding another type (another application's data, say). */
  private async checkKeyTypes(config: QueueConfig): Promise<void> {
    const expected = [...expectedTypes(config)];
    const types = await Promise.all(expected.map(([key]) => this.redis.client.type(key)));
    const i = types.findIndex((t, j) => t !== "none" && t !== expected[j][1]);
    if (i < 0) return;
    const [key, want] = expected[i];
    throw new SwitchyardError(
      "failed_precondition",
      `queue "${config.name}": key "${key}" already holds a ${types[i]}, where the queue keeps a ${want}; ` +
        `delete or rename that key, or choose other names`,
      { reason: "WRONG_KEY_TYPE", metadata: { queue: config.name, key } },
    );
  }

  /**
   * Declares a queue. The same declaration again is a no-op; a different one
   * for an existing name is ALREADY_EXISTS, unless `replace` (the config file),
   * which applies new settings but refuses new key names or a new mode: items
   * in flight sit under the old keys. A replace adds the stream groups it
   * names that are not declared yet and keeps every declared one (those made
   * by CreateConsumerGroup too): groups go only by DeleteConsumerGroup. A stream queue's declared groups are
   * created in Redis (XGROUP CREATE … MKSTREAM) once it is stored, and again
   * on every declaration of it (a group that exists keeps its position; on a
   * declared stream left with no group, expired or deleted since, the groups
   * start as a lease call restores them: see stream-restore.lua).
   */
  async create(spec: QueueSpec, options: { replace?: boolean } = {}): Promise<QueueConfig> {
    const { config, previous } = await this.store(spec, options);
    if (config.mode === "stream") {
      // The groups declared before first (those a declaration adds start where it says).
      const before = config.groups.filter((g) => previous?.groups.some((p) => p.name === g.name));
      if (before.length > 0) await restoreGroups(this.redis.client, config.name, before);
      await ensureGroups(this.redis.client, config);
    }
    return config;
  }

  /** Stores a declaration; `previous` is the one it found stored (the same, or replaced). */
  private async store(spec: QueueSpec, options: { replace?: boolean }): Promise<{ config: QueueConfig; previous?: QueueConfig }> {
    const config = validateQueueSpec(spec, this.clock.now(), this.namespace);
    for (;;) {
      const storedJson = await this.redis.client.hget(this.keys.queues, config.name);
      if (storedJson !== null) {
        const stored = parse(storedJson);
        // A config file adds groups but removes none: groups change through their own calls, as with UpdateQueue.
        const wanted = options.replace ? { ...config, groups: [...stored.groups, ...config.groups.filter((g) => !stored.groups.some((s) => s.name === g.name))] } : config;
        if (sameDeclaration(stored, wanted)) return { config: stored, previous: stored };
        if (!options.replace) {
          throw new SwitchyardError(
            "already_exists",
            `queue "${config.name}" is already declared with other options; delete it first, use UpdateQueue, or use another name`,
            { reason: "QUEUE_EXISTS", metadata: { queue: config.name } },
          );
        }
        if (shapeOf(stored) !== shapeOf(config)) throw this.immutable(stored, config);
        const next = { ...wanted, createTimeMs: stored.createTimeMs, incarnation: stored.incarnation, paused: stored.paused };
        if (await this.write(next, storedJson)) {
          await this.rebase(stored, next);
          return { config: next, previous: stored };
        }
        continue;
      }
      await this.checkKeyTypes(config);
      const created = { ...config, incarnation: randomBytes(12).toString("base64url") };
      if (await this.write(created, "")) return { config: created };
    }
  }

  /** FAILED_PRECONDITION: a declaration may not change its keys or mode. */
  private immutable(stored: QueueConfig, next: QueueConfig): SwitchyardError {
    return new SwitchyardError(
      "failed_precondition",
      `queue "${stored.name}" cannot change its mode or key names (now ${shapeOf(stored)}, asked ${shapeOf(next)}) ` +
        `while it is declared: items in flight sit under the old keys. Drain it and DeleteQueue first, or declare a new queue`,
      { reason: "IMMUTABLE_FIELD", metadata: { queue: stored.name } },
    );
  }

  /**
   * A stream queue's min_idle changed: entries handed back wait under the parking consumer with
   * idle times that say when they are due relative to min_idle, so each group's are moved by as
   * much (stream-rebase.lua) and stay due when they were. A group gone meanwhile has none; a
   * failure is logged, and the change stands.
   */
  private async rebase(old: QueueConfig, next: QueueConfig): Promise<void> {
    if (next.mode !== "stream" || old.minIdleMs === next.minIdleMs) return;
    const keys = keysOf(next);
    for (const g of next.groups) {
      await rebaseParked(this.redis.client, keys, g.name, next.minIdleMs - old.minIdleMs).catch((err: unknown) => {
        // The change stands; entries handed back before it keep the due times min_idle gave them then.
        if (!(err instanceof Error && /NOGROUP|no such key/i.test(err.message))) {
          this.log.warn("could not move the due times of entries handed back to the new min_idle", { queue: next.name, group: g.name, err });
        }
      });
    }
  }

  /** Writes `config` if the stored declaration is still `replaces`; false when it changed meanwhile. */
  private async write(config: QueueConfig, replaces: string): Promise<boolean> {
    const r = await declareQueue(this.redis.client, this.keys, config.name, JSON.stringify(config), replaces, allKeys(keysOf(config)));
    switch (r.result) {
      case "ok":
        this.applyChange(config.name, r.version, () => this.put(config));
        return true;
      case "clash":
        throw new SwitchyardError("already_exists", `key "${r.key}" already belongs to queue "${r.owner}"; choose other names`, {
          reason: "QUEUE_EXISTS",
          metadata: { queue: config.name, key: r.key },
        });
      default:
        return false; // raced with another write: read again
    }
  }

  /**
   * Changes a declared queue: `change` gets the stored declaration and returns
   * the new one (validated by the caller), written only if nothing changed it meanwhile.
   */
  async update(name: string, change: (stored: QueueConfig) => QueueConfig): Promise<QueueConfig> {
    for (;;) {
      const storedJson = await this.redis.client.hget(this.keys.queues, name);
      if (storedJson === null) return this.load(name); // NOT_FOUND
      const stored = parse(storedJson);
      const next = change(stored);
      if (shapeOf(stored) !== shapeOf(next)) throw this.immutable(stored, next);
      if (sameDeclaration(stored, next) && stored.paused === next.paused) return stored;
      if (await this.write(next, storedJson)) {
        await this.rebase(stored, next);
        return next;
      }
    }
  }

  /** Removes a declaration; with `purge`, also the queue's keys (but its fence counter: tokens stay unique). NOT_FOUND if undeclared. */
  async delete(name: string, purge: boolean): Promise<void> {
    // As Redis holds it: a cached declaration may be of an incarnation deleted since, with other keys.
    const config = await this.load(name);
    const keys = allKeys(keysOf(config));
    const version = await undeclareQueue(this.redis.client, this.keys, name, config.incarnation, keys);
    if (version === 0) {
      await this.load(name); // NOT_FOUND, unless it was declared again meanwhile (and then left as it is)
      throw new SwitchyardError("unavailable", `queue "${name}" was deleted and declared again while this delete ran; retry the delete if you mean to`, {
        reason: "CONTENDED",
        metadata: { queue: name },
      });
    }
    // (Its event came first, and a newer change after it: the listeners were told then.)
    this.applyChange(name, version, () => this.deleted(name));
    // One DEL per key: in a cluster, a simple queue's keys may sit in different slots.
    if (purge) await Promise.all(keys.filter((k) => k !== keysOf(config).fence).map((k) => this.redis.client.del(k)));
  }
}
