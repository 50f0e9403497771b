/**
 * The composition root shared by `main` and the tests:
 * config → Redis → clock → queues → gRPC server.
 */
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { readConfigFile, type Config } from "./config.js";
import { invalid } from "./errors.js";
import { SyncedClock, redisTime, systemClock, type Clock, type Timer } from "./clock.js";
import { createLogger, type Logger } from "./log.js";
import { QueueSchema, QueueService } from "./gen/switchyard/v1/queue_pb.js";
import { connectRedis, type RedisConnection } from "./redis/connection.js";
import { systemKeys } from "./redis/keys.js";
import { QueueRegistry } from "./queue/registry.js";
import { Queues } from "./queue/queues.js";
import { queueSpec } from "./grpc/convert.js";
import type { QueueSpec } from "./queue/declaration.js";
import { bind, createGrpcServer } from "./grpc/server.js";
import { ServingStatus, type Health } from "./grpc/health.js";
import { JobStore } from "./cron/store.js";
import { JobLogStore } from "./cron/job-log.js";
import { HandlerRegistry, registerBuiltins, type JobHandler } from "./cron/handlers.js";
import { Scheduler } from "./cron/scheduler.js";
import { HttpGuard, type HostResolver } from "./cron/http-guard.js";
import { AuditLogStore } from "./auth/audit-log.js";
import { Authenticator } from "./auth/authenticator.js";
import { authInterceptor } from "./grpc/auth-interceptor.js";
import { releaseUnaryFrames } from "./grpc/unary-frames.js";
import { serverCredentials } from "./grpc/tls.js";
import { DeliveryBuffers } from "./grpc/delivery-buffers.js";
import { observeCalls } from "./grpc/observe.js";
import { PromMetrics } from "./metrics/registry.js";
import { startSideServer, type SideServer } from "./metrics/http.js";
import { freeSocketPath, listenFailed, socketPath } from "./listen.js";
import { Readiness } from "./redis/readiness.js";
import { webApi, type WebApi } from "./web/gateway.js";
import { DashboardAssets } from "./web/assets.js";
import { CronService } from "./gen/switchyard/v1/cron_pb.js";
import { AuditService } from "./gen/switchyard/v1/audit_pb.js";
import { AuthService } from "./gen/switchyard/v1/auth_pb.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A running Switchyard instance. */
export interface App {
  /** host:port the gRPC server is bound to, or the unix:PATH it listens on. */
  readonly address: string;
  readonly queues: Queues;
  readonly scheduler: Scheduler;
  readonly health: Health;
  /** The one readiness check behind gRPC health and /readyz. */
  readonly readiness: Readiness;
  readonly redis: RedisConnection;
  readonly clock: Clock;
  /** host:port of the side HTTP port (/metrics, /healthz, /readyz); "" when it is off. */
  readonly httpAddress: string;
  readonly metrics: PromMetrics;
  /** Stops taking work, returns held items, closes Redis. */
  stop(): Promise<void>;
}

/** Injected parts (tests pass a manual clock). */
export interface AppParts {
  clock?: Clock;
  log?: Logger;
  /** Job handlers to register besides the built-ins (a name registered twice fails start-up). */
  handlers?: Record<string, JobHandler>;
  /** Resolves HTTP job targets' host names for the SSRF guard (default: the system resolver). */
  resolveHost?: HostResolver;
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
    await registry.create(withExplicitJitter(queueSpec(queue), json), { replace: true });
  }
}

/** JSON tells an explicit `"jitter": 0` from none, which proto3 cannot: a file that writes 0 means waits without jitter. */
function withExplicitJitter(spec: QueueSpec, json: unknown): QueueSpec {
  const policy = (json as { retryPolicy?: unknown; retry_policy?: unknown }).retryPolicy ?? (json as { retry_policy?: unknown }).retry_policy;
  if (typeof policy !== "object" || policy === null || (policy as { jitter?: unknown }).jitter !== 0) return spec;
  return { ...spec, retryPolicy: { ...spec.retryPolicy, jitter: 0 } };
}

function hostOf(address: string): string {
  return address.slice(0, address.lastIndexOf(":"));
}

/** Starts an instance from `config`. */
export async function startApp(config: Config, parts: AppParts = {}): Promise<App> {
  const log = parts.log ?? createLogger(config.logLevel);
  const metrics = new PromMetrics();
  const redis = await connectRedis(config.redis, log, {
    commandTimeoutMs: config.redisCommandTimeoutMs,
    keepAliveMs: config.redisKeepAliveMs,
    longestBlockMs: config.blockTimeoutSec * 1000,
  });
  // Why the instance is not serving, for readiness; undefined once it is.
  let phase: "starting" | "shutting down" | "shut down" | undefined = "starting";
  const readiness = new Readiness(redis, () => phase, { intervalMs: config.readinessIntervalMs, timeoutMs: config.readinessTimeoutMs });
  let side: SideServer | undefined;
  try {
    if (config.httpAddress) {
      const ready = () => readiness.check();
      side = await startSideServer(config.httpAddress, { metrics, hosts: config.httpHosts, live: () => phase !== "shut down", ready }, log).catch((err: unknown) => {
        throw listenFailed("SWITCHYARD_HTTP_ADDRESS", config.httpAddress, err);
      });
    }
    let clock = parts.clock;
    let clockResync: Timer | undefined;
    if (!clock) {
      const synced = new SyncedClock();
      const reference = redisTime(() => redis.time());
      await synced.sync(reference);
      // Host clocks drift: re-measure the offset to Redis's clock every minute.
      const resync = () => {
        clockResync = systemClock.setTimer(60_000, () => synced.sync(reference).catch(() => undefined).finally(resync));
      };
      resync();
      clock = synced;
    }
    const registry = new QueueRegistry(redis, systemKeys(config.namespace), clock, log, config.namespace);
    await registry.start();
    if (config.configFile) await declareFromFile(config.configFile, registry);
    const queues = new Queues(registry, redis, clock, config, log, metrics);
    await queues.start();
    const keys = systemKeys(config.namespace);
    const store = new JobStore(redis, keys, clock, config.maxCronJobs);
    const logs = new JobLogStore(redis, keys);
    const audit = new AuditLogStore(redis, keys);
    const handlers = new HandlerRegistry();
    const cleanable = [
      { name: "job logs", clean: (cutoff: number) => logs.clean(cutoff) },
      { name: "audit log", clean: (cutoff: number) => audit.clean(cutoff) },
    ];
    registerBuiltins(handlers, cleanable, config.logRetentionDays);
    for (const [name, handler] of Object.entries(parts.handlers ?? {})) handlers.register(name, handler);
    const scheduler = new Scheduler(
      redis, keys, store, logs, clock,
      { handlers, queues, clock, httpTimeoutMs: config.httpTimeoutMs, httpGuard: new HttpGuard(config.httpAllow, parts.resolveHost) },
      {
        instanceId: config.instanceId || undefined,
        lockTtlMs: config.jobLockTtlMs,
        resyncIntervalMs: config.schedulerResyncMs,
        heartbeatIntervalMs: config.schedulerHeartbeatMs,
        misfireGraceMs: config.misfireGraceMs,
      },
      log,
      metrics,
    );
    await scheduler.start();
    const authenticator = new Authenticator(config.auth);
    if (config.auth.implicitlyOff) {
      log.warn("authentication is off: every caller may call every RPC; configure SWITCHYARD_AUTH_TOKENS, or set SWITCHYARD_AUTH=off to say so");
    }
    const security = authInterceptor({
      authenticator, audit, clock, instanceId: scheduler.instanceId, maxLeaseStreamsPerToken: config.maxLeaseStreamsPerToken, log,
    });
    const buffers = new DeliveryBuffers(config.maxStreamBufferBytes, config.maxBufferedBytes);
    metrics.sample(
      "switchyard_lease_buffered_bytes",
      "Bytes of deliveries written to Lease streams and not yet taken by their connections (workers not reading).",
      () => buffers.bytes,
    );
    metrics.sample("switchyard_enqueue_pending_bytes", "Bytes of enqueued items written to Redis and not yet answered.", () => queues.pendingEnqueueBytes);
    const { server, health } = createGrpcServer(
      config, queues, { store, logs, scheduler, clock }, log, [releaseUnaryFrames(), observeCalls(metrics, log), security], audit, buffers,
    );
    if ((await freeSocketPath("SWITCHYARD_GRPC_ADDRESS", config.grpcAddress)).removedStale) {
      log.info("removed a stale socket that no instance answered on", { address: config.grpcAddress });
    }
    const port = await bind(server, config.grpcAddress, serverCredentials(config.tls)).catch((err: unknown) => {
      throw listenFailed("SWITCHYARD_GRPC_ADDRESS", config.grpcAddress, err);
    });
    const address = socketPath(config.grpcAddress) !== undefined ? config.grpcAddress : `${hostOf(config.grpcAddress)}:${port}`;
    // The web API reaches this server over a private unix socket (plain, whatever TLS the port uses;
    // calls still need their tokens), so it passes the same interceptors as every other call.
    let web: { api: WebApi; socketDir: string } | undefined;
    if (side && config.dashboard) {
      const socketDir = mkdtempSync(join(tmpdir(), "switchyard-"));
      const target = `unix:${join(socketDir, "grpc.sock")}`;
      await bind(server, target);
      const limits = { maxMessageBytes: config.maxMessageBytes, maxBodyBytes: config.maxHttpBodyBytes, authenticator };
      web = { api: webApi(target, [QueueService, CronService, AuditService, AuthService], limits), socketDir };
      side.setWeb({ api: web.api, assets: new DashboardAssets() });
    }
    readiness.onChange((reason) => health.setAll(reason === undefined ? ServingStatus.SERVING : ServingStatus.NOT_SERVING));
    readiness.start();
    side?.setQueues({
      names: () => registry.known().map((q) => q.name),
      stats: (name) => queues.stats(name),
      redisReady: () => redis.ready(),
    });
    phase = undefined;
    await readiness.check();
    log.info("switchyard listening", { address, httpAddress: side?.address });
    let stopping: Promise<void> | undefined;
    // Graceful shutdown (SPEC S5): NOT_SERVING first; lease streams drain within the grace
    // (settles still arrive, unary ones too), then their leftovers go back to the queues;
    // the scheduler stops and releases its locks; Redis closes last.
    const stop = async () => {
      phase = "shutting down";
      void readiness.check(); // NOT_SERVING at once
      readiness.stop();
      await queues.drain(config.shutdownGraceMs);
      await new Promise<void>((ok) => {
        server.tryShutdown(() => ok());
        // Calls still open (a stream whose worker never half-closes) are cut after a moment;
        // tryShutdown's callback does not always follow a forced shutdown, so don't wait for it.
        setTimeout(() => {
          server.forceShutdown();
          ok();
        }, 1000).unref();
      });
      clockResync?.cancel();
      await scheduler.stop();
      await queues.stop();
      await registry.stop();
      await redis.close();
      phase = "shut down";
      await side?.close();
      web?.api.close();
      if (web) rmSync(web.socketDir, { recursive: true, force: true });
    };
    return {
      address,
      queues,
      scheduler,
      health,
      readiness,
      redis,
      clock,
      httpAddress: side?.address ?? "",
      metrics,
      stop: () => (stopping ??= stop()),
    };
  } catch (err) {
    readiness.stop();
    await side?.close();
    await redis.close();
    throw err;
  }
}

