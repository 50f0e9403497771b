/**
 * The composition root shared by `main` and the tests:
 * config → Redis → clock → queues → gRPC server.
 */
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { readConfigFile, type Config } from "./config.js";
import { invalid } from "./errors.js";
import { SyncedClock, redisTime, systemClock, type Clock, type Timer } from "./clock.js";
import { createLogger, type Logger } from "./log.js";
import { QueueSchema } from "./gen/switchyard/v1/queue_pb.js";
import { connectRedis, type RedisConnection } from "./redis/connection.js";
import { systemKeys } from "./redis/keys.js";
import { QueueRegistry } from "./queue/registry.js";
import { Queues } from "./queue/queues.js";
import { queueSpec } from "./grpc/convert.js";
import { bind, createGrpcServer } from "./grpc/server.js";
import { ServingStatus, type Health } from "./grpc/health.js";
import { JobStore } from "./cron/store.js";
import { JobLogStore } from "./cron/job-log.js";
import { HandlerRegistry, registerBuiltins, type JobHandler } from "./cron/handlers.js";
import { Scheduler } from "./cron/scheduler.js";

/** A running Switchyard instance. */
export interface App {
  /** host:port the gRPC server is bound to. */
  readonly address: string;
  readonly queues: Queues;
  readonly scheduler: Scheduler;
  readonly health: Health;
  readonly redis: RedisConnection;
  readonly clock: Clock;
  /** Stops taking work, returns held items, closes Redis. */
  stop(): Promise<void>;
}

/** Injected parts (tests pass a manual clock). */
export interface AppParts {
  clock?: Clock;
  log?: Logger;
  /** Job handlers to register besides the built-ins (a name registered twice fails start-up). */
  handlers?: Record<string, JobHandler>;
}

async function declareFromFile(path: string, registry: QueueRegistry): Promise<void> {
  const file = readConfigFile(path);
  for (const [i, json] of file.queues.entries()) {
    let queue;
    try {
      queue = fromJson(QueueSchema, json as JsonValue);
    } catch (err) {
      throw invalid(`config file ${path}: queues[${i}]: ${err instanceof Error ? err.message : String(err)}`);
    }
    await registry.create(queueSpec(queue), { replace: true });
  }
}

function hostOf(address: string): string {
  return address.slice(0, address.lastIndexOf(":"));
}

/** Starts an instance from `config`. */
export async function startApp(config: Config, parts: AppParts = {}): Promise<App> {
  const log = parts.log ?? createLogger(config.logLevel);
  const redis = await connectRedis(config.redis, log);
  try {
    let clock = parts.clock;
    let clockResync: Timer | undefined;
    if (!clock) {
      const synced = new SyncedClock();
      const reference = redisTime(() => redis.client.time());
      await synced.sync(reference);
      // Host clocks drift: re-measure the offset to Redis's clock every minute.
      const resync = () => {
        clockResync = systemClock.setTimer(60_000, () => synced.sync(reference).catch(() => undefined).finally(resync));
      };
      resync();
      clock = synced;
    }
    const registry = new QueueRegistry(redis, systemKeys(config.namespace), clock, log);
    await registry.start();
    if (config.configFile) await declareFromFile(config.configFile, registry);
    const queues = new Queues(registry, redis, clock, config, log);
    queues.start();
    const keys = systemKeys(config.namespace);
    const store = new JobStore(redis, keys, clock);
    const logs = new JobLogStore(redis, keys);
    const handlers = new HandlerRegistry();
    registerBuiltins(handlers, [{ name: "job logs", clean: (cutoff) => logs.clean(cutoff) }], config.logRetentionDays);
    for (const [name, handler] of Object.entries(parts.handlers ?? {})) handlers.register(name, handler);
    const scheduler = new Scheduler(
      redis, keys, store, logs, clock,
      { handlers, queues, clock, httpTimeoutMs: config.httpTimeoutMs },
      {
        instanceId: config.instanceId || undefined,
        lockTtlMs: config.jobLockTtlMs,
        resyncIntervalMs: config.schedulerResyncMs,
        heartbeatIntervalMs: config.schedulerHeartbeatMs,
        misfireGraceMs: config.misfireGraceMs,
      },
      log,
    );
    await scheduler.start();
    const { server, health } = createGrpcServer(config, queues, { store, logs, scheduler, clock }, log);
    const port = await bind(server, config.grpcAddress);
    const address = `${hostOf(config.grpcAddress)}:${port}`;
    const follow = () => health.setAll(redis.ready() ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
    for (const event of ["ready", "close", "end", "reconnecting", "error"]) redis.client.on(event, follow);
    follow();
    log.info("switchyard listening", { address });
    let stopping: Promise<void> | undefined;
    // Graceful shutdown (SPEC S5): NOT_SERVING first; lease streams drain within the grace
    // (settles still arrive, unary ones too), then their leftovers go back to the queues;
    // the scheduler stops and releases its locks; Redis closes last.
    const stop = async () => {
      health.setAll(ServingStatus.NOT_SERVING);
      await queues.drain(config.shutdownGraceMs);
      await new Promise<void>((ok) => {
        server.tryShutdown(() => ok());
        // Calls still open (a stream whose worker never half-closes) are cut after a moment.
        setTimeout(() => server.forceShutdown(), 1000).unref();
      });
      clockResync?.cancel();
      await scheduler.stop();
      await queues.stop();
      await registry.stop();
      await redis.close();
    };
    return {
      address,
      queues,
      scheduler,
      health,
      redis,
      clock,
      stop: () => (stopping ??= stop()),
    };
  } catch (err) {
    await redis.close();
    throw err;
  }
}

