/**
 * The benchmark's own world: a private redis-server (no persistence) on a unix
 * socket, an in-process Switchyard on a loopback port, the project's TS client,
 * and the connection options the peers (BullMQ, raw ioredis) use.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import type { RedisOptions as BullRedisOptions } from "bullmq";
import { startEmbeddedRedis, type EmbeddedRedis } from "../dist/redis/embedded.js";
import { startApp, type App } from "../dist/app.js";
import { loadConfig, type Config } from "../dist/config.js";
import { createLogger } from "../dist/log.js";
import { SwitchyardClient } from "../dist/client/client.js";
import type { Clock } from "../dist/clock.js";
import type { JobHandler } from "../dist/cron/handlers.js";

export interface BenchRedis {
  server: EmbeddedRedis;
  socketPath: string;
  /** Loopback TCP port, or 0 when Redis listens on its socket only. */
  port: number;
  dir: string;
  /** A plain ioredis client (sanity checks, clean-up, INFO). */
  plain: Redis;
  /** ioredis options for peers (BullMQ needs maxRetriesPerRequest: null on workers). */
  peerOptions: BullRedisOptions;
  stop(): Promise<void>;
}

export async function startBenchRedis(port = 0): Promise<BenchRedis> {
  const dir = mkdtempSync(join(tmpdir(), "sy-bench-"));
  const server = await startEmbeddedRedis({
    dir,
    appendOnly: false,
    port,
    // 10,000 lease streams + bursts of BullMQ connections: keep Redis' defaults otherwise.
    extraArgs: ["--maxclients", "20000", "--slowlog-log-slower-than", "5000", "--slowlog-max-len", "256"],
  });
  const plain = new Redis({ path: server.socketPath });
  return {
    server,
    socketPath: server.socketPath,
    port,
    dir,
    plain,
    peerOptions: { path: server.socketPath, maxRetriesPerRequest: null },
    async stop() {
      plain.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Settings the benchmark gives every Switchyard it starts (in-process or as a
 * child): gRPC on a free loopback port, log level warn, no side HTTP port (its
 * default port may be taken), and room for row 9's 10,000 jobs. A build whose
 * config has no such variable ignores it.
 */
export const benchEnv: Record<string, string> = {
  SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
  SWITCHYARD_LOG_LEVEL: "warn",
  SWITCHYARD_HTTP_ADDRESS: "off",
  SWITCHYARD_AUTH: "off",
  SWITCHYARD_MAX_CRON_JOBS: "20000",
  SWITCHYARD_MAX_LEASE_STREAMS_PER_TOKEN: "20000",
};

/** A Switchyard config on `socketPath`, log level warn, gRPC on a free loopback port. */
export function benchConfig(socketPath: string, overrides: Partial<Config> = {}, env: Record<string, string> = {}): Config {
  const base = loadConfig({ ...benchEnv, ...env });
  return { ...base, redis: { kind: "socket", path: socketPath }, shutdownGraceMs: 2000, ...overrides };
}

export interface BenchApp {
  app: App;
  client: SwitchyardClient;
  stop(): Promise<void>;
}

/** Starts an in-process Switchyard and a client of it over real gRPC on loopback. */
export async function startBenchApp(
  socketPath: string,
  options: { config?: Partial<Config>; clock?: Clock; handlers?: Record<string, JobHandler> } = {},
): Promise<BenchApp> {
  const config = benchConfig(socketPath, options.config);
  const app = await startApp(config, { clock: options.clock, log: createLogger(config.logLevel), handlers: options.handlers });
  const client = new SwitchyardClient(app.address);
  return {
    app,
    client,
    async stop() {
      client.close();
      await app.stop();
    },
  };
}

/** Deletes every key matching `pattern` (SCAN + UNLINK, in bounded batches). */
export async function deleteKeys(plain: Redis, pattern: string): Promise<number> {
  let cursor = "0";
  let deleted = 0;
  for (let i = 0; i < 100_000; i++) {
    const [next, keys] = await plain.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    if (keys.length) deleted += await plain.unlink(...keys);
    cursor = next;
    if (cursor === "0") break;
  }
  return deleted;
}
