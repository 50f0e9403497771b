/**
 * The instance's one readiness check. gRPC health (grpc.health.v1) and
 * /readyz both answer from it, so they cannot disagree (issue 17: a hung Redis
 * left gRPC health SERVING while /readyz said 503).
 *
 * Ready means: the instance serves (not starting, not shutting down) and Redis
 * answers a PING within `timeoutMs` (on a cluster, every master does). The
 * check runs every `intervalMs`, at once when the command connection changes
 * state, and whenever someone asks (/readyz); listeners hear of each change.
 * The probe's deadline is wall time: it measures the network, not queue time.
 */
import { Cluster } from "ioredis";
import type { RedisConnection } from "./connection.js";

/** Why the instance is not ready, or undefined when it is. */
export type NotReady = string | undefined;

/** How often to check, and how long a PING may take. */
export interface ReadinessOptions {
  intervalMs: number;
  timeoutMs: number;
}

export class Readiness {
  private reason: NotReady = "starting";
  private probe?: Promise<NotReady>;
  private timer?: NodeJS.Timeout;
  private readonly listeners = new Set<(reason: NotReady) => void>();
  private readonly onConnection = () => void this.check();

  constructor(
    private readonly redis: RedisConnection,
    /** Why the instance does not serve (starting, shutting down), or undefined. */
    private readonly notServing: () => NotReady,
    private readonly options: ReadinessOptions,
  ) {}

  /** The outcome of the last check. */
  get current(): NotReady {
    return this.reason;
  }

  /** Calls `fn` with every change of the outcome. */
  onChange(fn: (reason: NotReady) => void): void {
    this.listeners.add(fn);
  }

  /** Checks every interval and on every connection change until stop(). */
  start(): void {
    for (const event of ["ready", "close", "end", "reconnecting", "error"]) this.redis.client.on(event, this.onConnection);
    const tick = () => {
      this.timer = setTimeout(() => void this.check().finally(tick), this.options.intervalMs);
      this.timer.unref();
    };
    tick();
  }

  stop(): void {
    clearTimeout(this.timer);
    for (const event of ["ready", "close", "end", "reconnecting", "error"]) this.redis.client.off(event, this.onConnection);
  }

  /**
   * Checks now and resolves to the outcome (a check already running is joined).
   * Not serving is known at once, with no PING.
   */
  check(): Promise<NotReady> {
    const phase = this.notServing();
    if (phase) {
      this.set(phase);
      return Promise.resolve(phase);
    }
    this.probe ??= this.ping().then((reason) => {
      this.probe = undefined;
      // The phase may have changed while the PING was out.
      const outcome = this.notServing() ?? reason;
      this.set(outcome);
      return outcome;
    });
    return this.probe;
  }

  private set(reason: NotReady): void {
    if (reason === this.reason) return;
    this.reason = reason;
    for (const fn of this.listeners) fn(reason);
  }

  private async ping(): Promise<NotReady> {
    if (!this.redis.ready()) return "redis is unreachable";
    const { client } = this.redis;
    const { timeoutMs } = this.options;
    let timer: NodeJS.Timeout | undefined;
    // The verdict waits for the I/O after the timer: when the event loop was blocked (a GC, a large
    // message), timers run before the socket's data is read, and a PING already answered would lose.
    const timeout = new Promise<string>((ok) => {
      timer = setTimeout(() => setImmediate(() => ok(`redis did not answer PING within ${timeoutMs} ms`)), timeoutMs);
    });
    const nodes = client instanceof Cluster ? client.nodes("master") : [client];
    const pings = Promise.all(nodes.map((node) => node.ping())).then(
      () => undefined,
      (err: unknown) => `redis PING failed: ${err instanceof Error ? err.message : String(err)}`,
    );
    try {
      return await Promise.race([pings, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
