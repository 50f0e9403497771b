/**
 * The declared queues: stored in one Redis hash, cached on each instance and
 * kept fresh through a pub/sub channel, so a declaration made through any
 * instance is usable on every other one.
 */
import { SwitchyardError } from "../errors.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";
import type { RedisConnection } from "../redis/connection.js";
import { allKeys, type SystemKeys } from "../redis/keys.js";
import { keysOf, sameDeclaration, validateQueueSpec, type QueueConfig, type QueueSpec } from "./declaration.js";

/** A page of declarations. */
export interface QueuePage {
  queues: QueueConfig[];
  nextPageToken: string;
}

export class QueueRegistry {
  private cache = new Map<string, QueueConfig>();
  /** Reads from Redis of declarations not in the cache, by name, while they are out. */
  private readonly loading = new Map<string, Promise<QueueConfig>>();
  private unsubscribe?: () => void;
  private readonly deletedListeners: ((name: string) => void)[] = [];

  constructor(
    private readonly redis: RedisConnection,
    private readonly keys: SystemKeys,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  /**
   * Loads every declaration and follows changes made by other instances; after
   * each reconnect to Redis it loads them again, since change events may have
   * been missed and a restarted Redis may have lost declarations.
   */
  async start(): Promise<void> {
    this.unsubscribe = await this.redis.subscribe(this.keys.events, (message) => this.onEvent(message));
    await this.reload();
    this.redis.client.on("ready", this.onReconnect);
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    this.redis.client.off("ready", this.onReconnect);
  }

  private readonly onReconnect = () => {
    this.reload().catch((err: unknown) => this.log.warn("could not reload queue declarations after reconnecting to redis", { err }));
  };

  /** Replaces the cache with what Redis holds; declarations gone from Redis count as deleted. */
  private async reload(): Promise<void> {
    const all = await this.redis.client.hgetall(this.keys.queues);
    const fresh = new Map(Object.entries(all).map(([name, json]) => [name, JSON.parse(json) as QueueConfig]));
    const gone = [...this.cache.keys()].filter((name) => !fresh.has(name));
    this.cache = fresh;
    for (const name of gone) for (const fn of this.deletedListeners) fn(name);
  }

  /** Calls `fn` with the name of every queue deleted, through any instance. */
  onDeleted(fn: (name: string) => void): void {
    this.deletedListeners.push(fn);
  }

  private onEvent(message: string): void {
    try {
      const event = JSON.parse(message) as { op: "put" | "delete"; name: string; config?: QueueConfig };
      if (event.op === "put" && event.config) this.cache.set(event.name, event.config);
      if (event.op === "delete") {
        this.cache.delete(event.name);
        for (const fn of this.deletedListeners) fn(event.name);
      }
    } catch (err) {
      this.log.warn("ignored a malformed queue event", { err });
    }
  }

  /** Every declaration this instance knows of (the cache; fresh within a pub/sub round trip). */
  known(): QueueConfig[] {
    return [...this.cache.values()];
  }

  /** The declaration of `name`, or NOT_FOUND. */
  get(name: string): Promise<QueueConfig> {
    // While a read of `name` is out, later calls wait for it too, even once the cache holds the
    // name (a change event may fill it first): callers then go on in call order, so an
    // EnqueueStream's requests to a queue reach the push in the order they came.
    const loading = this.loading.get(name);
    if (loading) return loading;
    const cached = this.cache.get(name);
    if (cached) return Promise.resolve(cached);
    const load = this.load(name).finally(() => this.loading.delete(name));
    this.loading.set(name, load);
    return load;
  }

  private async load(name: string): Promise<QueueConfig> {
    const json = await this.redis.client.hget(this.keys.queues, name);
    if (json === null) {
      throw new SwitchyardError("not_found", `queue "${name}" is not declared; declare it with CreateQueue or in the config file`);
    }
    const config = JSON.parse(json) as QueueConfig;
    this.cache.set(name, config);
    return config;
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

  private async checkNoClash(config: QueueConfig): Promise<void> {
    const mine = new Set(config.mode === "reliable" ? allKeys(keysOf(config)) : [config.name]);
    const all = await this.redis.client.hgetall(this.keys.queues);
    for (const [name, json] of Object.entries(all)) {
      if (name === config.name) continue;
      const other = JSON.parse(json) as QueueConfig;
      const theirs = other.mode === "reliable" ? allKeys(keysOf(other)) : [other.name];
      const shared = theirs.find((k) => mine.has(k));
      if (shared) {
        throw new SwitchyardError("already_exists", `key "${shared}" already belongs to queue "${name}"; choose other names`);
      }
    }
  }

  /**
   * Declares a queue. The same declaration again is a no-op; a different one
   * for an existing name is ALREADY_EXISTS (unless `replace`, used for the config file).
   */
  async create(spec: QueueSpec, options: { replace?: boolean } = {}): Promise<QueueConfig> {
    const config = validateQueueSpec(spec, this.clock.now());
    const existingJson = await this.redis.client.hget(this.keys.queues, config.name);
    if (existingJson !== null) {
      const existing = JSON.parse(existingJson) as QueueConfig;
      if (sameDeclaration(existing, config)) return existing;
      if (!options.replace) {
        throw new SwitchyardError(
          "already_exists",
          `queue "${config.name}" is already declared with other options; delete it first or use another name`,
        );
      }
    }
    await this.checkNoClash(config);
    if (existingJson === null) {
      // HSETNX: of two instances declaring one name at once, the second sees the first's.
      if (!(await this.redis.client.hsetnx(this.keys.queues, config.name, JSON.stringify(config)))) return this.create(spec, options);
    }
    const stored = existingJson === null ? config : { ...config, createTimeMs: (JSON.parse(existingJson) as QueueConfig).createTimeMs };
    if (existingJson !== null) await this.redis.client.hset(this.keys.queues, config.name, JSON.stringify(stored));
    this.cache.set(config.name, stored);
    await this.redis.client.publish(this.keys.events, JSON.stringify({ op: "put", name: config.name, config: stored }));
    return stored;
  }

  /** Removes a declaration; with `purge`, also the queue's keys. NOT_FOUND if undeclared. */
  async delete(name: string, purge: boolean): Promise<void> {
    const config = await this.get(name);
    await this.redis.client.hdel(this.keys.queues, name);
    this.cache.delete(name);
    if (purge) {
      const keys = config.mode === "reliable" ? allKeys(keysOf(config)) : [config.name, keysOf(config).fence];
      // One DEL per key: in a cluster, a simple queue's keys may sit in different slots.
      await Promise.all(keys.map((k) => this.redis.client.del(k)));
    }
    await this.redis.client.publish(this.keys.events, JSON.stringify({ op: "delete", name }));
  }
}
