/**
 * Configuration: the only reader of process.env. Every setting has a default
 * in one literal below; `loadConfig` validates and freezes the result.
 */
import { readFileSync } from "node:fs";
import { invalid } from "./errors.js";
import { listenAddress } from "./listen.js";
import type { LogLevel } from "./log.js";
import type { RedisSecurity, RedisTarget } from "./redis/connection.js";
import { securitySettings, type AuthSettings, type TlsSettings } from "./auth/settings.js";
import { parseAllowlist, type AllowRule } from "./cron/http-guard.js";

const SECOND = 1000;
const MINUTE = 60 * SECOND;

/** Switchyard's settings. */
export interface Config {
  /** host:port the gRPC server listens on, or unix:PATH for a unix socket. */
  readonly grpcAddress: string;
  /** host:port of the side HTTP port (/metrics, /healthz, /readyz); "" when turned off. */
  readonly httpAddress: string;
  /** Serve the web dashboard and its API (/dashboard/, /api/) on the side HTTP port. */
  readonly dashboard: boolean;
  /** Load an OpenTelemetry preload module before grpc-js (main.ts). */
  readonly otel: boolean;
  /** The module `otel` loads: a package name, a path or a file: URL. */
  readonly otelModule: string;
  readonly redis: RedisTarget;
  /** Prefix (and hash tag) of Switchyard's own Redis keys. */
  readonly namespace: string;
  /** JSON file declaring queues at start-up, or "". */
  readonly configFile: string;
  readonly maxPayloadBytes: number;
  readonly maxItemsPerEnqueue: number;
  readonly maxMessageBytes: number;
  readonly maxCredit: number;
  readonly leaseBatch: number;
  readonly heartbeatIntervalMs: number;
  readonly watchdogIntervalMs: number;
  /** Silence after which a queue-serving instance counts as dead, and another returns its deliveries. */
  readonly instanceTimeoutMs: number;
  readonly blockTimeoutSec: number;
  /** 0: connections live as long as clients keep them. */
  readonly maxConnectionAgeMs: number;
  readonly maxConnectionAgeGraceMs: number;
  readonly shutdownGraceMs: number;
  readonly logLevel: LogLevel;
  /** Cron: the execution lock's backstop TTL. */
  readonly jobLockTtlMs: number;
  /** Cron: HTTP target timeout. */
  readonly httpTimeoutMs: number;
  /** Cron: LogClean's retention when its params name none. */
  readonly logRetentionDays: number;
  /** Cron: a tick fired later than this is a misfire. */
  readonly misfireGraceMs: number;
  /** Cron: how often each instance reloads every job. */
  readonly schedulerResyncMs: number;
  /** Cron: how often each instance records its scheduler status. */
  readonly schedulerHeartbeatMs: number;
  /** Cron: a name for this instance in logs and scheduler status ("" = host-pid-random). */
  readonly instanceId: string;
  /** Who may call what (bearer tokens, client certificates, scopes); see src/auth. */
  readonly auth: AuthSettings;
  /** TLS on the gRPC port; undefined for plaintext. */
  readonly tls: TlsSettings | undefined;
  /** Cron: HTTP targets let through the SSRF guard although internal. */
  readonly httpAllow: readonly AllowRule[];
  /** Open Lease streams per authenticated caller per instance. */
  readonly maxLeaseStreamsPerToken: number;
  /** Cron: jobs that may exist (not deleted) at once. */
  readonly maxCronJobs: number;
  /** A Redis command unanswered this long fails with UNAVAILABLE, and a connection silent this long with commands out is made again. */
  readonly redisCommandTimeoutMs: number;
  /** TCP keepalive on every Redis connection: probes start after this long idle. */
  readonly redisKeepAliveMs: number;
  /** How often the readiness check (gRPC health and /readyz) asks Redis for a PING. */
  readonly readinessIntervalMs: number;
  /** A PING unanswered this long makes the instance not ready. */
  readonly readinessTimeoutMs: number;
  /** Largest stored form of one item (payload, headers, id and envelope) on Enqueue. */
  readonly maxItemBytes: number;
  /** Bytes of enqueued items one instance holds while they wait for Redis; more is RESOURCE_EXHAUSTED. */
  readonly maxPendingEnqueueBytes: number;
  /** Delivery bytes one Lease stream may have written and not yet taken by its worker. */
  readonly maxStreamBufferBytes: number;
  /** The same, over every Lease stream of the instance. */
  readonly maxBufferedBytes: number;
  /** A Lease stream that sends no open this long is ended. */
  readonly leaseOpenTimeoutMs: number;
  /** Concurrent calls one client connection may have open (HTTP/2 max concurrent streams). */
  readonly maxStreamsPerConnection: number;
  /** A client connection with no call open this long is closed. */
  readonly connectionIdleTimeoutMs: number;
  /** grpc.health.v1 Watch calls open at once on one instance. */
  readonly maxHealthWatches: number;
  /** Host names (besides IP addresses and localhost) the side HTTP port answers to. */
  readonly httpHosts: readonly string[];
  /** Largest request body the side port's web API reads. */
  readonly maxHttpBodyBytes: number;
  /** Nice value (0–19) of the process's threads but the main one (V8's compiler and GC helpers); 0 leaves them alone. */
  readonly backgroundNice: number;
}

/** The defaults, in one place. */
export const defaults = {
  grpcAddress: "127.0.0.1:50051",
  httpAddress: "127.0.0.1:9090",
  otelModule: "@opentelemetry/auto-instrumentations-node/register",
  namespace: "switchyard",
  dataDir: ".switchyard-data",
  redisServerBin: "redis-server",
  maxPayloadBytes: 1024 * 1024,
  maxItemsPerEnqueue: 10_000,
  maxMessageBytes: 64 * 1024 * 1024,
  maxCredit: 10_000,
  leaseBatch: 256,
  heartbeatIntervalMs: 15 * SECOND,
  watchdogIntervalMs: 1 * SECOND,
  instanceTimeoutMs: 30 * SECOND,
  blockTimeoutSec: 1,
  maxConnectionAgeMs: 0,
  maxConnectionAgeGraceMs: 5 * MINUTE,
  shutdownGraceMs: 30 * SECOND,
  logLevel: "info" as LogLevel,
  jobLockTtlMs: 300 * SECOND,
  httpTimeoutMs: 30 * SECOND,
  logRetentionDays: 90,
  misfireGraceMs: 5 * SECOND,
  schedulerResyncMs: 30 * SECOND,
  schedulerHeartbeatMs: 5 * SECOND,
  maxLeaseStreamsPerToken: 1000,
  maxCronJobs: 10_000,
  redisCommandTimeoutMs: 5 * SECOND,
  redisKeepAliveMs: 10 * SECOND,
  readinessIntervalMs: 1 * SECOND,
  readinessTimeoutMs: 1 * SECOND,
  /** Over the payload limit: room for headers. */
  itemOverheadBytes: 64 * 1024,
  maxPendingEnqueueBytes: 128 * 1024 * 1024,
  maxStreamBufferBytes: 16 * 1024 * 1024,
  maxBufferedBytes: 256 * 1024 * 1024,
  leaseOpenTimeoutMs: 10 * SECOND,
  maxStreamsPerConnection: 1000,
  connectionIdleTimeoutMs: 5 * MINUTE,
  maxHealthWatches: 1000,
  maxHttpBodyBytes: 4 * 1024 * 1024,
  backgroundNice: 19,
};

const units: Record<string, number> = { ms: 1, s: SECOND, m: MINUTE, h: 60 * MINUTE };

/** Parses "500ms", "15s", "5m", "24h" (or a bare number of ms). */
export function parseDuration(name: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw invalid(`${name}="${text}" is not a duration; write e.g. 500ms, 15s, 5m or 24h`);
  return Math.round(Number(m[1]) * units[m[2] ?? "ms"]);
}

/** A nice value for SWITCHYARD_BACKGROUND_NICE: an integer from 0 (off) to 19. */
function niceValue(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined || text === "") return fallback;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n > 19) throw invalid(`${name}="${text}" must be a nice value from 0 (leave the threads alone) to 19`);
  return n;
}

function positiveInt(name: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw invalid(`${name}="${text}" must be a positive integer`);
  return n;
}

/** "host:port,host:port" (IPv6 as [::1]:7000) of `variable`. */
function hostPorts(variable: string, text: string): { host: string; port: number }[] {
  return text.split(",").map((hp) => {
    const m = /^\s*\[?([^\]]+?)\]?:(\d+)\s*$/.exec(hp);
    if (!m) throw invalid(`${variable} entry "${hp}" is not host:port`);
    return { host: m[1], port: Number(m[2]) };
  });
}

/** SWITCHYARD_REDIS_USERNAME/PASSWORD/TLS/TLS_CA, for the targets that take them apart from a URL. */
function redisSecurity(env: NodeJS.ProcessEnv): RedisSecurity {
  const tls = onOff("SWITCHYARD_REDIS_TLS", env.SWITCHYARD_REDIS_TLS) || !!env.SWITCHYARD_REDIS_TLS_CA;
  return {
    username: env.SWITCHYARD_REDIS_USERNAME || undefined,
    password: env.SWITCHYARD_REDIS_PASSWORD || undefined,
    tls: tls ? { caFile: env.SWITCHYARD_REDIS_TLS_CA || undefined } : undefined,
  };
}

function redisTarget(env: NodeJS.ProcessEnv): RedisTarget {
  const url = env.SWITCHYARD_REDIS_URL;
  const nodes = env.SWITCHYARD_REDIS_CLUSTER_NODES;
  const sentinels = env.SWITCHYARD_REDIS_SENTINELS;
  const given = Object.entries({ SWITCHYARD_REDIS_URL: url, SWITCHYARD_REDIS_CLUSTER_NODES: nodes, SWITCHYARD_REDIS_SENTINELS: sentinels })
    .filter(([, v]) => v)
    .map(([k]) => k);
  if (given.length > 1) throw invalid(`set one of SWITCHYARD_REDIS_URL, SWITCHYARD_REDIS_CLUSTER_NODES or SWITCHYARD_REDIS_SENTINELS, not both ${given.join(" and ")}`);
  const security = redisSecurity(env);
  if (!nodes && !sentinels) {
    // A URL carries its own credentials (redis://user:password@host) and TLS (rediss://); only a CA may come apart.
    const misplaced = ["SWITCHYARD_REDIS_USERNAME", "SWITCHYARD_REDIS_PASSWORD", "SWITCHYARD_REDIS_TLS"].find((v) => env[v]);
    if (misplaced || (env.SWITCHYARD_REDIS_TLS_CA && !url?.startsWith("rediss://"))) {
      throw invalid(
        `${misplaced ?? "SWITCHYARD_REDIS_TLS_CA"} is for SWITCHYARD_REDIS_CLUSTER_NODES, SWITCHYARD_REDIS_SENTINELS or a rediss:// ` +
          "SWITCHYARD_REDIS_URL; with a URL write credentials and TLS into it (rediss://user:password@host:6379)",
      );
    }
  }
  if (url?.startsWith("unix://")) return { kind: "socket", path: url.slice("unix://".length) };
  if (url) return { kind: "standalone", url, tls: security.tls };
  if (nodes) return { kind: "cluster", nodes: hostPorts("SWITCHYARD_REDIS_CLUSTER_NODES", nodes), ...security };
  if (sentinels) {
    const name = env.SWITCHYARD_REDIS_SENTINEL_MASTER;
    if (!name) throw invalid("SWITCHYARD_REDIS_SENTINELS needs SWITCHYARD_REDIS_SENTINEL_MASTER: the master name the sentinels monitor");
    return {
      kind: "sentinel",
      sentinels: hostPorts("SWITCHYARD_REDIS_SENTINELS", sentinels),
      name,
      sentinelPassword: env.SWITCHYARD_REDIS_SENTINEL_PASSWORD || undefined,
      ...security,
    };
  }
  return {
    kind: "embedded",
    dataDir: env.SWITCHYARD_DATA_DIR ?? defaults.dataDir,
    binary: env.SWITCHYARD_REDIS_SERVER_BIN ?? defaults.redisServerBin,
  };
}

/** SWITCHYARD_HTTP_ADDRESS: a listening address, or "" for off. */
function httpOff(text: string): string {
  return text === "off" ? "" : listenAddress("SWITCHYARD_HTTP_ADDRESS", text);
}

function onOff(name: string, text: string | undefined): boolean {
  if (text === undefined || text === "" || text === "off") return false;
  if (text === "on") return true;
  throw invalid(`${name}="${text}" must be on or off`);
}

/** Host names for SWITCHYARD_HTTP_HOSTS: comma-separated, lower case, no ports. */
function hostNames(text: string): string[] {
  const names = text.split(",").map((h) => h.trim().toLowerCase().replace(/\.$/, "")).filter(Boolean);
  for (const name of names) {
    if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/.test(name)) {
      throw invalid(`SWITCHYARD_HTTP_HOSTS entry "${name}" is not a host name; list names such as switchyard.internal, without ports`);
    }
  }
  return names;
}

const logLevels = new Set(["debug", "info", "warn", "error", "silent"]);

/** Reads the configuration from environment variables (see the README's table). */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const num = (name: string, fallback: number) => (env[name] ? positiveInt(name, env[name]!) : fallback);
  const dur = (name: string, fallback: number) => (env[name] ? parseDuration(name, env[name]!) : fallback);
  const positiveDur = (name: string, fallback: number) => {
    const ms = dur(name, fallback);
    if (ms <= 0) throw invalid(`${name} must be more than 0`);
    return ms;
  };
  const logLevel = env.SWITCHYARD_LOG_LEVEL ?? defaults.logLevel;
  if (!logLevels.has(logLevel)) throw invalid(`SWITCHYARD_LOG_LEVEL="${logLevel}" must be one of debug, info, warn, error, silent`);
  const maxPayloadBytes = num("SWITCHYARD_MAX_PAYLOAD_BYTES", defaults.maxPayloadBytes);
  const maxItemBytes = num("SWITCHYARD_MAX_ITEM_BYTES", maxPayloadBytes + defaults.itemOverheadBytes);
  if (maxItemBytes < maxPayloadBytes) {
    throw invalid(`SWITCHYARD_MAX_ITEM_BYTES=${maxItemBytes} is below SWITCHYARD_MAX_PAYLOAD_BYTES=${maxPayloadBytes}; a stored item holds its payload`);
  }
  return Object.freeze({
    grpcAddress: listenAddress("SWITCHYARD_GRPC_ADDRESS", env.SWITCHYARD_GRPC_ADDRESS ?? defaults.grpcAddress, true),
    httpAddress: httpOff(env.SWITCHYARD_HTTP_ADDRESS ?? defaults.httpAddress),
    dashboard: env.SWITCHYARD_DASHBOARD === undefined ? true : onOff("SWITCHYARD_DASHBOARD", env.SWITCHYARD_DASHBOARD),
    otel: onOff("SWITCHYARD_OTEL", env.SWITCHYARD_OTEL),
    otelModule: env.SWITCHYARD_OTEL_MODULE || defaults.otelModule,
    redis: redisTarget(env),
    namespace: env.SWITCHYARD_NAMESPACE ?? defaults.namespace,
    configFile: env.SWITCHYARD_CONFIG_FILE ?? "",
    maxPayloadBytes,
    maxItemsPerEnqueue: num("SWITCHYARD_MAX_ITEMS_PER_ENQUEUE", defaults.maxItemsPerEnqueue),
    maxMessageBytes: num("SWITCHYARD_MAX_MESSAGE_BYTES", defaults.maxMessageBytes),
    maxCredit: num("SWITCHYARD_MAX_CREDIT", defaults.maxCredit),
    leaseBatch: num("SWITCHYARD_LEASE_BATCH", defaults.leaseBatch),
    heartbeatIntervalMs: dur("SWITCHYARD_HEARTBEAT_INTERVAL", defaults.heartbeatIntervalMs),
    watchdogIntervalMs: dur("SWITCHYARD_WATCHDOG_INTERVAL", defaults.watchdogIntervalMs),
    instanceTimeoutMs: dur("SWITCHYARD_INSTANCE_TIMEOUT", defaults.instanceTimeoutMs),
    blockTimeoutSec: defaults.blockTimeoutSec,
    maxConnectionAgeMs: dur("SWITCHYARD_MAX_CONNECTION_AGE", defaults.maxConnectionAgeMs),
    maxConnectionAgeGraceMs: dur("SWITCHYARD_MAX_CONNECTION_AGE_GRACE", defaults.maxConnectionAgeGraceMs),
    shutdownGraceMs: dur("SWITCHYARD_SHUTDOWN_GRACE", defaults.shutdownGraceMs),
    logLevel: logLevel as LogLevel,
    jobLockTtlMs: dur("SWITCHYARD_JOB_LOCK_TTL", defaults.jobLockTtlMs),
    httpTimeoutMs: dur("SWITCHYARD_HTTP_TIMEOUT", defaults.httpTimeoutMs),
    logRetentionDays: num("SWITCHYARD_LOG_RETENTION_DAYS", defaults.logRetentionDays),
    misfireGraceMs: dur("SWITCHYARD_MISFIRE_GRACE", defaults.misfireGraceMs),
    schedulerResyncMs: dur("SWITCHYARD_SCHEDULER_RESYNC", defaults.schedulerResyncMs),
    schedulerHeartbeatMs: dur("SWITCHYARD_SCHEDULER_HEARTBEAT", defaults.schedulerHeartbeatMs),
    instanceId: env.SWITCHYARD_INSTANCE_ID ?? "",
    ...securitySettings({
      auth: env.SWITCHYARD_AUTH,
      tokens: env.SWITCHYARD_AUTH_TOKENS,
      tlsCert: env.SWITCHYARD_TLS_CERT,
      tlsKey: env.SWITCHYARD_TLS_KEY,
      tlsCa: env.SWITCHYARD_TLS_CA,
      tlsClientAuth: env.SWITCHYARD_TLS_CLIENT_AUTH,
      tlsClientScopes: env.SWITCHYARD_TLS_CLIENT_SCOPES,
    }),
    httpAllow: parseAllowlist(env.SWITCHYARD_HTTP_ALLOW ?? ""),
    maxLeaseStreamsPerToken: num("SWITCHYARD_MAX_LEASE_STREAMS_PER_TOKEN", defaults.maxLeaseStreamsPerToken),
    maxCronJobs: num("SWITCHYARD_MAX_CRON_JOBS", defaults.maxCronJobs),
    redisCommandTimeoutMs: positiveDur("SWITCHYARD_REDIS_COMMAND_TIMEOUT", defaults.redisCommandTimeoutMs),
    redisKeepAliveMs: positiveDur("SWITCHYARD_REDIS_KEEPALIVE", defaults.redisKeepAliveMs),
    readinessIntervalMs: defaults.readinessIntervalMs,
    readinessTimeoutMs: defaults.readinessTimeoutMs,
    maxItemBytes,
    maxPendingEnqueueBytes: num("SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES", defaults.maxPendingEnqueueBytes),
    maxStreamBufferBytes: num("SWITCHYARD_LEASE_STREAM_BUFFER_BYTES", defaults.maxStreamBufferBytes),
    maxBufferedBytes: num("SWITCHYARD_LEASE_BUFFER_BYTES", defaults.maxBufferedBytes),
    leaseOpenTimeoutMs: positiveDur("SWITCHYARD_LEASE_OPEN_TIMEOUT", defaults.leaseOpenTimeoutMs),
    maxStreamsPerConnection: num("SWITCHYARD_MAX_STREAMS_PER_CONNECTION", defaults.maxStreamsPerConnection),
    connectionIdleTimeoutMs: positiveDur("SWITCHYARD_CONNECTION_IDLE_TIMEOUT", defaults.connectionIdleTimeoutMs),
    maxHealthWatches: num("SWITCHYARD_MAX_HEALTH_WATCHES", defaults.maxHealthWatches),
    httpHosts: hostNames(env.SWITCHYARD_HTTP_HOSTS ?? ""),
    maxHttpBodyBytes: num("SWITCHYARD_HTTP_MAX_BODY_BYTES", defaults.maxHttpBodyBytes),
    backgroundNice: niceValue("SWITCHYARD_BACKGROUND_NICE", env.SWITCHYARD_BACKGROUND_NICE, defaults.backgroundNice),
  });
}

/** The contents of a config file: queue declarations in protobuf JSON (see README). */
export interface ConfigFile {
  queues: unknown[];
}

/** Reads and parses the config file; INVALID_ARGUMENT with the file name when it is not valid JSON. */
export function readConfigFile(path: string): ConfigFile {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw invalid(`config file ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const queues = (parsed as { queues?: unknown }).queues ?? [];
  if (!Array.isArray(queues)) throw invalid(`config file ${path}: "queues" must be an array`);
  return { queues };
}
