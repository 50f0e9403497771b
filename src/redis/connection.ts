/**
/**
 * Connects to Redis in one of four ways: a standalone URL, Redis Cluster seed
 * nodes, Redis Sentinel, or an embedded redis-server child process when nothing
 * is configured.
 *
 * Every connection has TCP keepalive, and none waits for Redis forever
 * (issue 17: a blackholed link hung every call):
 * - the command connection: a command unanswered within `commandTimeoutMs`
 *   fails ("Command timed out"), and a connection that has received nothing
 *   for as long while commands are out is dropped and made again, failing the
 *   rest (MaxRetriesPerRequestError). Nothing is sent twice: a command in
 *   flight when its connection drops fails, and is never sent again on the next.
 *   Either way the command may have run: its outcome is unknown.
 * - blocking readers (`duplicate()`, for BLMOVE and SUBSCRIBE): no command
 *   timeout, which would cut a legitimate block; the connection is dropped once
 *   it has been silent for the longest block plus `commandTimeoutMs`.
 * - the replica waiter (`waiter()`): pushes followed by WAIT, which blocks its
 *   connection for up to its timeout, so it must not stall the command
 *   connection; each of its commands carries its own timeout (pushItems).
 */
import { readFileSync } from "node:fs";
import type { ConnectionOptions } from "node:tls";
import { Cluster, Redis, type RedisOptions } from "ioredis";
import { invalid } from "../errors.js";
import { defaults } from "../config.js";
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
  /** A new, connected connection for blocking commands (BLMOVE, SUBSCRIBE): no command timeout. */
  duplicate(): Promise<RedisClient>;
  /** The connection for pushes that WAIT for replicas (made on first use), apart from the command connection that WAIT would block. */
  waiter(): Promise<RedisClient>;
  /** How long a command may take before it fails, ms. */
  readonly commandTimeoutMs: number;
  /**
   * Calls `fn` with every message on `channel`. All subscriptions share one
   * pub/sub connection; the returned function unsubscribes. `resync` is called
   * once that connection listens again after it was lost: messages published
   * meanwhile were missed, so read afresh what they would have told.
   */
  subscribe(channel: string, fn: (message: string) => void, resync?: () => void): Promise<() => void>;
  /**
   * Redis's clock (TIME). On a cluster, always the same master's (the first
   * by host:port), so that every instance follows one clock.
   */
  time(): Promise<(string | number)[]>;
  /** True while the command connection is ready. */
  ready(): boolean;
  close(): Promise<void>;
}

/** How long Redis may take to answer, on every connection. */
export interface RedisTimeouts {
  /** A command unanswered this long fails; a connection silent this long with commands out is made again. */
  commandTimeoutMs: number;
  /** TCP keepalive: probes start after a connection has been idle this long. */
  keepAliveMs: number;
  /** The longest a blocking read (BLMOVE) asks Redis to wait, ms. */
  longestBlockMs: number;
  /**
   * How long connecting waits for a Redis Cluster to be ready (every master says
   * cluster_state:ok, as its nodes come to agree) before it fails; default 30 s.
   */
  clusterReadyTimeoutMs?: number;
}

/** See RedisTimeouts.clusterReadyTimeoutMs. */
export const CLUSTER_READY_TIMEOUT_MS = 30_000;

const defaultTimeouts: RedisTimeouts = {
  commandTimeoutMs: defaults.redisCommandTimeoutMs,
  keepAliveMs: defaults.redisKeepAliveMs,
  longestBlockMs: defaults.blockTimeoutSec * 1000,
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

/** The longest replica_timeout an Enqueue may ask for (queues.ts checks it). */
export const MAX_REPLICA_WAIT_MS = 60_000;

/** Options of each connection to one Redis node. */
function nodeOptions(t: RedisTimeouts): RedisOptions {
  return {
    // Fail commands at once while disconnected: callers see UNAVAILABLE instead of hanging.
    enableOfflineQueue: false,
    // A command in flight when its connection drops fails then; it is never sent again on the
    // next connection, where a write the caller was told had failed would land after all.
    maxRetriesPerRequest: 0,
    commandTimeout: t.commandTimeoutMs,
    socketTimeout: t.commandTimeoutMs,
    keepAlive: t.keepAliveMs,
  };
}

/** Options for a connection whose commands legitimately get no answer for `silentMs` (a block, a WAIT). */
function patientOptions(t: RedisTimeouts, silentMs: number): RedisOptions {
  return { ...nodeOptions(t), commandTimeout: undefined, socketTimeout: silentMs + t.commandTimeoutMs };
}

const retryStrategy = (attempt: number) => Math.min(50 * 2 ** attempt, 1000);

function createClient(target: Exclude<RedisTarget, { kind: "embedded" }>, t: RedisTimeouts): RedisClient {
  switch (target.kind) {
    case "standalone":
      return new Redis(target.url, { ...nodeOptions(t), retryStrategy, lazyConnect: true, ...(target.tls ? { tls: tlsOptions(target.tls) } : {}) });
    case "socket":
      return new Redis({ ...nodeOptions(t), retryStrategy, path: target.path, lazyConnect: true });
    case "cluster":
      return new Cluster(target.nodes, {
        lazyConnect: true,
        enableOfflineQueue: false,
        clusterRetryStrategy: retryStrategy,
        redisOptions: { ...nodeOptions(t), username: target.username, password: target.password, tls: tlsOptions(target.tls) },
      });
    case "sentinel": {
      const tls = tlsOptions(target.tls);
      return new Redis({
        ...nodeOptions(t),
        retryStrategy,
        lazyConnect: true,
        sentinels: target.sentinels,
        name: target.name,
        sentinelPassword: target.sentinelPassword,
        username: target.username,
        password: target.password,
        tls,
        sentinelTLS: tls,
        enableTLSForSentinelMode: tls !== undefined,
        // Follow +switch-master at once (see reconnectAbortedAttempts); a command that still meets
        // the demoted master fails (READONLY: it did not run, so UNAVAILABLE) and the connection
        // asks the sentinels again.
        failoverDetector: true,
        reconnectOnError: (err) => err.message.startsWith("READONLY"),
      });
    }
  }
}

/**
 * ioredis 5.11 arms `socketTimeout` once per client and disarms it only when data comes: a
 * connection that dropped with a command unanswered left it armed, and when it fired it
 * destroyed the connection made since, healthy or not, failing whatever that one had out
 * (ioredis issue 2147, fixed in 6.0). Disarmed here on each close, for every node's connection.
 */
function disarmStaleSocketTimeout(client: RedisClient): void {
  const guard = (node: Redis) =>
    node.on("close", () => {
      const armed = node as unknown as { socketTimeoutTimer?: NodeJS.Timeout };
      clearTimeout(armed.socketTimeoutTimer);
      armed.socketTimeoutTimer = undefined;
    });
  if (client instanceof Cluster) client.on("+node", guard);
  else guard(client);
}

/**
 * ioredis 5.11 (6.0 as well) gives a Sentinel client up for good when its connection is dropped
 * while it is asking the sentinels for the master (or waiting to ask them again): that attempt
 * fails "Connection is closed." and the client goes to "end", not "reconnecting". The failover
 * detector drops it so on +switch-master, which comes while the client still retries the dead
 * master: a failover could thus end a connection for the life of the process (the command
 * connection: every call UNAVAILABLE; a blocking reader or the subscriber: silent). Such a client
 * is connected again here, at once, as the detector meant; one closed by disconnect() or quit()
 * (which set ioredis's manuallyClosing) stays closed.
 */
function reconnectAbortedAttempts(client: RedisClient, log: Logger): void {
  if (client instanceof Cluster || !client.options.sentinels) return;
  // Ended from "connecting" (no "close" since): the attempt itself was dropped.
  let connecting = false;
  client.on("connecting", () => (connecting = true)).on("close", () => (connecting = false));
  client.on("end", () => {
    const closing = (client as unknown as { manuallyClosing?: boolean }).manuallyClosing;
    if (!connecting || closing || client.status !== "end") return;
    log.info("redis connection dropped while it asked the sentinels for the master; connecting again");
    client.connect().catch(() => undefined); // failing, it reconnects as any connection does (retryStrategy)
  });
}

/** A new connection like `client`'s, with `options` for each node; not yet connected. */
function duplicateWith(client: RedisClient, options: RedisOptions): RedisClient {
  if (!(client instanceof Cluster)) return client.duplicate(options);
  // A cluster duplicate skips the ready check (CLUSTER INFO on a connection of its own): the
  // command client checked the cluster already, so a blocking reader holds one connection.
  return client.duplicate([], { enableReadyCheck: false, redisOptions: { ...client.options.redisOptions, ...options } });
}

/**
 * Connects `client`; a connection that fails is disconnected (a client left to itself
 * would go on reconnecting, unseen, for the life of the process).
 *
 * A cluster client is connected once ioredis says it is ready, not when its connect()
 * settles: connect() settles only with its own attempt, and an attempt whose ready
 * check fails (CLUSTER INFO on a node that does not say cluster_state:ok yet, as in a
 * cluster whose nodes are still agreeing, or a seed that agreed before the others)
 * reconnects with a new attempt and leaves that promise pending for ever, though the
 * client is ready moments later (ioredis issue 709). ioredis asks one node, picked at
 * random; a client that checks (the command connection, not a duplicate) then waits
 * until every master says cluster_state:ok, so that start-up does not meet CLUSTERDOWN
 * from the others. A cluster no node of which can be reached still fails at once, as a
 * single Redis does; one still not ready after `readyWithinMs` fails then.
 */
async function open(client: RedisClient, log: Logger, readyWithinMs: number): Promise<RedisClient> {
  try {
    if (client instanceof Cluster) await clusterReady(client, log, readyWithinMs);
    else await client.connect();
  } catch (err) {
    client.disconnect();
    throw err;
  }
  return client;
}

async function clusterReady(client: Cluster, log: Logger, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  await clientReady(client, log, withinMs);
  if (client.options.enableReadyCheck === false) return;
  let waited = false;
  for (;;) {
    const states = await Promise.all(client.nodes("master").map((node) =>
      node.cluster("INFO").then((info) => /^cluster_state:ok\b/m.test(String(info)), () => false)));
    if (states.every(Boolean)) return;
    if (!waited) log.warn("redis cluster not ready yet: a master does not say cluster_state:ok; waiting", { withinMs });
    waited = true;
    if (Date.now() >= deadline) {
      throw new Error(`Cluster isn't ready: ${states.filter((ok) => !ok).length} of ${states.length} masters do not say cluster_state:ok after ${withinMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Resolves once `client` says "ready" (see open). */
function clientReady(client: Cluster, log: Logger, withinMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let warned = false;
    const onReady = () => done();
    const onEnd = () => done(new Error("None of startup nodes is available"));
    const onRetry = () => {
      if (!warned) log.warn("redis cluster not ready yet (a node says cluster_state is not ok); retrying", { withinMs });
      warned = true;
    };
    const timer = setTimeout(
      () => done(new Error(`Cluster isn't ready: no cluster_state:ok within ${withinMs} ms (CLUSTER INFO on the nodes asked)`)),
      withinMs,
    );
    const done = (err?: unknown) => {
      clearTimeout(timer);
      client.off("ready", onReady).off("end", onEnd).off("reconnecting", onRetry);
      if (err === undefined) resolve();
      else reject(err);
    };
    client.once("ready", onReady).once("end", onEnd).on("reconnecting", onRetry);
    client.connect().then(() => done(), done);
  });
}

/** Connects to `target`, starting an embedded redis-server first when asked to. */
export async function connectRedis(target: RedisTarget, log: Logger, timeouts: RedisTimeouts = defaultTimeouts): Promise<RedisConnection> {
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
  const client = createClient(direct, timeouts);
  disarmStaleSocketTimeout(client);
  reconnectAbortedAttempts(client, log);
  client.on("error", onError);
  client.on("ready", () => (lastError = ""));
  const readyWithinMs = timeouts.clusterReadyTimeoutMs ?? CLUSTER_READY_TIMEOUT_MS;
  await open(client, log, readyWithinMs);
  defineScripts(client);
  const extra = new Set<RedisClient>();
  const connectExtra = async (options: RedisOptions) => {
    const dup = duplicateWith(client, options);
    disarmStaleSocketTimeout(dup);
    reconnectAbortedAttempts(dup, log);
    dup.on("error", onError);
    extra.add(dup);
    // Closed for good: reconnectAbortedAttempts, listening first, has connected again one that was not.
    dup.on("end", () => {
      if (dup.status === "end") extra.delete(dup);
    });
    return open(dup, log, readyWithinMs);
  };
  const duplicate = () => connectExtra(patientOptions(timeouts, timeouts.longestBlockMs));
  let waiter: Promise<RedisClient> | undefined;
  const listeners = new Map<string, Set<(message: string) => void>>();
  const resyncs = new Set<() => void>();
  let subscriber: Promise<RedisClient> | undefined;
  // A cluster client subscribes on a connection of its own, apart from its command connections;
  // a single Redis connection in subscriber mode takes no other commands, so it needs a duplicate.
  // A standalone subscriber subscribes again itself after each reconnect: ioredis's own
  // resubscribe leaves its promise unhandled when that connection drops too (Node then ends the
  // process), and the connection after it no longer subscribes at all.
  const subscriberConnection = () =>
    (subscriber ??= (client instanceof Cluster ? Promise.resolve(client) : connectExtra({ ...patientOptions(timeouts, timeouts.longestBlockMs), autoResubscribe: false })).then((sub) => {
      sub.on("message", (channel: string, message: string) => listeners.get(channel)?.forEach((fn) => fn(message)));
      // Made again after it was lost (CLIENT KILL TYPE pubsub, an output buffer limit, this socket alone cut):
      // once it listens again (SUBSCRIBE answered), whatever is read afresh misses nothing published after.
      // Failing, this connection dropped again: the next "ready" tries again.
      sub.on("ready", () => {
        const channels = [...listeners.keys()];
        if (channels.length === 0) return;
        sub.subscribe(...channels).then(
          () => resyncs.forEach((fn) => fn()),
          (err: unknown) => log.warn("could not subscribe again after reconnecting to redis", { err }),
        );
      });
      return sub;
    }));
  return {
    client,
    cluster: client instanceof Cluster,
    duplicate,
    waiter: () => (waiter ??= connectExtra(patientOptions(timeouts, MAX_REPLICA_WAIT_MS)).catch((err: unknown) => {
      waiter = undefined; // the next push that waits tries again
      throw err;
    })),
    commandTimeoutMs: timeouts.commandTimeoutMs,
    async subscribe(channel, fn, resync) {
      const sub = await subscriberConnection();
      let fns = listeners.get(channel);
      if (!fns) {
        fns = new Set();
        listeners.set(channel, fns);
        await sub.subscribe(channel);
      }
      fns.add(fn);
      if (resync) resyncs.add(resync);
      return () => {
        fns.delete(fn);
        if (resync) resyncs.delete(resync);
      };
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
  /Connection is closed|Stream isn't writeable|ECONNREFUSED|ECONNRESET|ENOENT|EPIPE|ETIMEDOUT|CLUSTERDOWN|LOADING|MASTERDOWN|TRYAGAIN|Too many Cluster redirections|Cluster isn't ready|None of startup nodes|Reached the max retries|Command timed out|^READONLY/;

/**
 * Runs a MULTI and resolves to its replies, or throws its first command's
 * error: ioredis resolves exec() with per-command errors in the replies (a
 * WRONGTYPE inside EXEC, after the other commands were applied), which a
 * caller that only awaits it would take for success.
 */
export async function execAll(tx: ReturnType<RedisClient["multi"]>): Promise<unknown[]> {
  const replies = await tx.exec();
  if (!replies) throw new Error("a Redis transaction was aborted");
  const failed = replies.find(([err]) => err);
  if (failed) throw failed[0];
  return replies.map(([, reply]) => reply);
}

/** True for errors that mean Redis could not be reached (as opposed to a bad command). */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === "MaxRetriesPerRequestError" || connectionErrorPattern.test(err.message);
}

/**
 * True for errors after which a command may have run although its caller saw
 * it fail: no reply within the command timeout ("Command timed out"), or its
 * connection dropped while it was out (MaxRetriesPerRequestError). Errors of
 * a command that was never sent ("Stream isn't writeable …") are not.
 */
export function isUnknownOutcome(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.name === "MaxRetriesPerRequestError" || err.message === "Command timed out";
}

/** True for Redis refusing a write because it is out of memory (maxmemory with noeviction). */
export function isOutOfMemory(err: unknown): boolean {
  return outOfMemoryRefusal(err) !== undefined;
}

/**
 * Redis's words when it refused `err`'s command for want of memory, else undefined. A plain
 * write answers "OOM command not allowed …"; a script's write the same, behind the script's
 * name; a MULTI, whose every queued command Redis refuses then (reads too), EXECABORT with
 * those refusals behind it.
 */
export function outOfMemoryRefusal(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const said = /\bOOM command not allowed[^.]*/.exec(err.message)?.[0];
  if (said || !err.message.startsWith("EXECABORT")) return said;
  const previous = (err as { previousErrors?: unknown }).previousErrors;
  return Array.isArray(previous) ? previous.map(outOfMemoryRefusal).find((s) => s !== undefined) : undefined;
}
