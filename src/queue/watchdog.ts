/**
 * The recovery watchdog (SPEC Q5): on every instance, for every queue with a
 * recovery set, it returns claims idle longer than min_idle to the queue, and
 * gives a claim to processing items that have none, so they are recovered too.
 * Every pass is a few atomic scripts, so instances running it at once is safe.
 */
import type { Clock, Timer } from "../clock.js";
import type { Logger } from "../log.js";
import { noMetrics, type Metrics } from "../metrics/hooks.js";
import type { RedisClient } from "../redis/connection.js";
import { recoverStale, sweepUnclaimed } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";

/** Claims recovered by one script call. */
// 200 claims keep each recover.lua call near 2 ms, so other clients' commands never wait
// long behind it (at 1000 a call took ~11 ms; see bench row 8).
const RECOVER_CHUNK = 200;
/** Processing items examined by one sweep call. */
const SWEEP_CHUNK = 1000;
/** Bounds one pass, so a huge backlog cannot monopolise an instance. */
const MAX_CHUNKS_PER_PASS = 1000;

/** What one pass did. */
export interface WatchdogPass {
  recovered: number;
  deadLettered: number;
  claimsAdded: number;
}

export class Watchdog {
  private timer?: Timer;
  private running?: Promise<WatchdogPass>;

  constructor(
    private readonly client: RedisClient,
    private readonly clock: Clock,
    private readonly queues: () => QueueConfig[],
    private readonly intervalMs: number,
    private readonly log: Logger,
    private readonly metrics: Metrics = noMetrics,
  ) {}

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer = this.clock.setTimer(this.intervalMs, async () => {
      try {
        await this.pass();
      } catch (err) {
        this.log.warn("watchdog pass failed", { err });
      }
      if (this.timer) this.schedule();
    });
  }

  /** Runs one pass over every queue with a recovery set (one at a time per instance). */
  pass(): Promise<WatchdogPass> {
    this.running ??= this.passOnce().finally(() => (this.running = undefined));
    return this.running;
  }

  private async passOnce(): Promise<WatchdogPass> {
    const total: WatchdogPass = { recovered: 0, deadLettered: 0, claimsAdded: 0 };
    for (const config of this.queues()) {
      if (config.mode !== "reliable" || !config.recoverySet) continue;
      const keys = keysOf(config);
      for (let chunk = 0; chunk < MAX_CHUNKS_PER_PASS; chunk++) {
        const r = await recoverStale(this.client, keys, this.clock.now(), config.minIdleMs, RECOVER_CHUNK, config.maxDeliveries);
        total.recovered += r.recovered;
        total.deadLettered += r.deadLettered;
        if (r.recovered) this.metrics.items(config.name, "recovered", r.recovered);
        if (r.deadLettered) this.metrics.items(config.name, "dead_lettered", r.deadLettered);
        if (r.seen < RECOVER_CHUNK) break;
      }
      for (let first = 0, chunk = 0; chunk < MAX_CHUNKS_PER_PASS; chunk++, first += SWEEP_CHUNK) {
        const s = await sweepUnclaimed(this.client, keys, this.clock.now(), first, first + SWEEP_CHUNK - 1);
        total.claimsAdded += s.added;
        if (first + SWEEP_CHUNK >= s.length) break;
      }
    }
    if (total.recovered + total.deadLettered + total.claimsAdded > 0) this.log.info("watchdog pass", { ...total });
    return total;
  }
}
