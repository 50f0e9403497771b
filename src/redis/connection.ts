/**
 * Connects to Redis in one of four ways: a standalone URL, Redis Cluster seed
 * nodes, Redis Sentinel, or an embedded redis-server child process when nothing
 * is configured.
 */
import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";
import { Cluster, Redis } from "ioredis";
import { invalid } from "../errors.js";
import type { Logger } from "../log.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "./embedded.js";
import { defineScripts } from "./scripts.js";

/** A command connection: a single Redis or a cluster client. */
export type RedisClient = Redis | Cluster;

/** TLS to Redis: on, trusting the system's CAs or the one in `caFile`. */
export interface RedisTls {
  caFile?: string;
}

/** Credentials and TLS of the servers behind cluster seeds or Sentinel (a URL carries its own). */
export interface RedisSecurity {
  username?: string;
  password?: string;
  tls?: RedisTls;
}

/** Where Redis is. */
export type RedisTarget =
  | { kind: "standalone"; url: string; tls?: RedisTls }
  | { kind: "socket"; path: string }
  | ({ kind: "cluster"; nodes: { host: string; port: number }[] } & RedisSecurity)
  | ({ kind: "sentinel"; sentinels: { host: string; port: number }[]; name: string; sentinelPassword?: string } & RedisSecurity)
  | { kind: "embedded"; dataDir: string; binary: string };

/** Open connections to one Redis deployment. */
export interface RedisConnection {
  /** The shared command connection (ioredis pipelines concurrent commands on it). */
  readonly client: RedisClient;
  readonly cluster: boolean;
  /** A new, connected connection for blocking commands. */
  duplicate(): Promise<RedisClient>;
  /**
   * Calls `fn` with every message on `channel`. All subscriptions share one
   * pub/sub connection; the returned function unsubscribes.
   */
  subscribe(channel: string, fn: (message: string) => void): Promise<() => void>;
  /**
   * Redis's clock (TIME). On a cluster, always the same master's (the first
   * by host:port), so that every instance follows one clock.
   */
  time(): Promise<(string | number)[]>;
  /** True while the command connection is ready. */
  ready(): boolean;
  close(): Promise<void>;
}

const commonOptions = {
  // Fail commands at once while disconnected: callers see UNAVAILABLE instead of hanging.
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  retryStrategy: (attempt: number) => Math.min(50 * 2 ** attempt, 1000),
};

function tlsOptions(tls: RedisTls | undefined): ConnectionOptions | undefined {
  if (!tls) return undefined;
  if (!tls.caFile) return {};
  try {
    return { ca: readFileSync(tls.caFile) };
  } catch (err) {
    throw invalid(`SWITCHYARD_REDIS_TLS_CA: cannot read "${tls.caFile}": ${err instanceof Error ? err.message : String(err)}`);
  }
}

function createClient(target: Exclude<RedisTarget, { kind: "embedded" }>): RedisClient {
  switch (target.kind) {
    case "standalone":
      return new Redis(target.url, { ...commonOptions, lazyConnect: true, ...(target.tls ? { tls: tlsOptions(target.tls) } : {}) });
    case "socket":
      return new Redis({ ...commonOptions, path: target.path, lazyConnect: true });
    case "cluster":
      return new Cluster(target.nodes, {
        lazyConnect: true,
        enableOfflineQueue: false,
        clusterRetryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 1000),
        redisOptions: { maxRetriesPerRequest: 1, username: target.username, password: target.password, tls: tlsOptions(target.tls) },
      });
    case "sentinel": {
      const tls = tlsOptions(target.tls);
      return new Redis({
        ...commonOptions,
        lazyConnect: true,
        sentinels: target.sentinels,
        name: target.name,
        sentinelPassword: target.sentinelPassword,
        username: target.username,
        password: target.password,
        tls,
        sentinelTLS: tls,
        enableTLSForSentinelMode: tls !== undefined,
        // Follow +switch-master at once; a command that still meets the demoted master fails
        // (READONLY: it did not run, so UNAVAILABLE) and the connection asks the sentinels again.
        failoverDetector: true,
        reconnectOnError: (err) => err.message.startsWith("READONLY"),
      });
    }
  }
}

async function open(client: RedisClient): Promise<RedisClient> {
  await client.connect();
  return client;
}

/** Connects to `target`, starting an embedded redis-server first when asked to. */
export async function connectRedis(target: RedisTarget, log: Logger): Promise<RedisConnection> {
  let embedded: EmbeddedRedis | undefined;
  let direct: Exclude<RedisTarget, { kind: "embedded" }>;
  if (target.kind === "embedded") {
    embedded = await startEmbeddedRedis({ dir: target.dataDir, binary: target.binary, appendOnly: true });
    log.info("embedded redis started", { dir: target.dataDir, socket: embedded.socketPath });
    direct = { kind: "socket", path: embedded.socketPath };
  } else {
    direct = target;
  }
  // Connection errors surface as failed commands (UNAVAILABLE) and health changes; the
  // listeners keep ioredis from reporting them as unhandled.
  let lastError = "";
  const onError = (err: Error) => {
    if (err.message !== lastError) log.warn("redis connection error", { err: err.message });
    lastError = err.message;
  };
  const client = createClient(direct);
  client.on("error", onError);
  client.on("ready", () => (lastError = ""));
  await open(client);
  defineScripts(client);
  const extra = new Set<RedisClient>();
  const duplicate = async () => {
    // A cluster duplicate skips the ready check (CLUSTER INFO on a connection of its own): the
    // command client checked the cluster already, so a blocking reader holds one connection.
    const dup = client instanceof Cluster ? client.duplicate([], { enableReadyCheck: false }) : client.duplicate();
    dup.on("error", onError);
    extra.add(dup);
    dup.once("end", () => extra.delete(dup));
    return open(dup);
  };
  const listeners = new Map<string, Set<(message: string) => void>>();
  let subscriber: Promise<RedisClient> | undefined;
  // A cluster client subscribes on a connection of its own, apart from its command connections;
  // a single Redis connection in subscriber mode takes no other commands, so it needs a duplicate.
  const subscriberConnection = () =>
    (subscriber ??= (client instanceof Cluster ? Promise.resolve(client) : duplicate()).then((sub) => {
      sub.on("message", (channel: string, message: string) => listeners.get(channel)?.forEach((fn) => fn(message)));
      return sub;
    }));
  return {
    client,
    cluster: client instanceof Cluster,
    duplicate,
    async subscribe(channel, fn) {
      const sub = await subscriberConnection();
      let fns = listeners.get(channel);
      if (!fns) {
        fns = new Set();
        listeners.set(channel, fns);
        await sub.subscribe(channel);
      }
      fns.add(fn);
      return () => void fns.delete(fn);
    },
    time() {
      if (!(client instanceof Cluster)) return client.time();
      const address = (r: Redis) => `${r.options.host}:${r.options.port}`;
      const [first] = client.nodes("master").sort((a, b) => address(a).localeCompare(address(b)));
      return (first ?? client).time();
    },
    ready: () => client.status === "ready",
    async close() {
      for (const c of extra) c.disconnect();
      await client.quit().catch(() => client.disconnect());
      await embedded?.stop();
    },
  };
}

// TRYAGAIN and "Too many Cluster redirections": a cluster slot kept migrating past ioredis's retries.
// READONLY: a Sentinel failover demoted the master this connection still talks to.
const connectionErrorPattern =
  /Connection is closed|Stream isn't writeable|ECONNREFUSED|ECONNRESET|ENOENT|EPIPE|ETIMEDOUT|CLUSTERDOWN|LOADING|MASTERDOWN|TRYAGAIN|Too many Cluster redirections|Cluster isn't ready|None of startup nodes|Reached the max retries|^READONLY/;

/** True for errors that mean Redis could not be reached (as opposed to a bad command). */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === "MaxRetriesPerRequestError" || connectionErrorPattern.test(err.message);
}
