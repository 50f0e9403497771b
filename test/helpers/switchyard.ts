/** Starts real Switchyard instances on 127.0.0.1:0 for tests. */
import { startApp, type App } from "../../src/app.js";
import { loadConfig, type Config } from "../../src/config.js";
import { ManualClock, type Clock } from "../../src/clock.js";
import { createLogger, type Logger } from "../../src/log.js";
import { SwitchyardClient } from "../../src/client/client.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import type { HostResolver } from "../../src/cron/http-guard.js";
import { afterAll, beforeAll } from "vitest";
import { startRedis, type TestRedis } from "./redis.js";

/** A running instance and a client connected to it. */
export interface TestSwitchyard {
  app: App;
  client: SwitchyardClient;
  address: string;
  clock: Clock;
  stop(): Promise<void>;
}

/**
 * Starts an instance against `redis` with an injected clock: a ManualClock
 * unless given one, or the production clock (Redis's) with "redis".
 */
export async function startSwitchyard(
  redis: Pick<TestRedis, "target">,
  options: {
    clock?: Clock | "redis";
    env?: Record<string, string>;
    config?: Partial<Config>;
    handlers?: Record<string, JobHandler>;
    /** The SSRF guard's DNS resolver for HTTP job targets. */
    resolveHost?: HostResolver;
    /** A bearer token for `client`. */
    token?: string;
    /** The instance's logger (tests capture its lines); by default one at the config's level on stderr. */
    log?: Logger;
  } = {},
): Promise<TestSwitchyard> {
  const base = loadConfig({
    SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
    SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0",
    SWITCHYARD_LOG_LEVEL: process.env.SWITCHYARD_LOG_LEVEL ?? "error",
    ...options.env,
  });
  const config: Config = { ...base, redis: redis.target, shutdownGraceMs: 200, ...options.config };
  const clock = options.clock === "redis" ? undefined : (options.clock ?? new ManualClock());
  const app = await startApp(config, { clock, log: options.log ?? createLogger(config.logLevel), handlers: options.handlers, resolveHost: options.resolveHost });
  const client = new SwitchyardClient(app.address, { token: options.token });
  return {
    app,
    client,
    address: app.address,
    clock: app.clock,
    async stop() {
      client.close();
      await app.stop();
    },
  };
}

/**
 * A private Redis and one instance for the whole test file, started before its
 * tests and stopped after them: `const t = useSwitchyard(); … t.sy.client …`.
 */
export function useSwitchyard(options: Parameters<typeof startSwitchyard>[1] = {}): { readonly redis: TestRedis; readonly sy: TestSwitchyard } {
  let redis: TestRedis | undefined;
  let sy: TestSwitchyard | undefined;
  beforeAll(async () => {
    redis = await startRedis();
    sy = await startSwitchyard(redis, options);
  });
  afterAll(async () => {
    await sy?.stop();
    await redis?.stop();
  });
  return {
    get redis() {
      return redis!;
    },
    get sy() {
      return sy!;
    },
  };
}
