/**
 * The recovery watchdog (SPEC Q5), on every instance, once per interval:
 * - beats this instance's heart, and returns the deliveries of instances
 *   whose heart stopped (see instances.ts), and retires their consumers from
 *   STREAM queues' groups;
 * - for every queue with a recovery set, takes back claims idle longer than
 *   min_idle (after the retry policy's wait), and gives a delivery and a claim
 *   to processing items that have none, so they are recovered too.
 * Every step is an atomic script, so instances running it at once is safe.
 */
import type { Clock, Timer } from "../clock.js";
import type { Logger } from "../log.js";
import { noMetrics, type Metrics } from "../metrics/hooks.js";
import type { RedisClient } from "../redis/connection.js";
import { adoptOrphans, policyArg, recoverStale, retireConsumer, type RecoverResult } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import type { Instances } from "./instances.js";
import type { Settler } from "./settler.js";

// 50 claims keep each recover.lua call under 1 ms on the bench machines (0.6 ms on the AMD host of
// bench/README's 3 December sections: about 12.5 µs a claim).
// The pass keeps one call queued behind the running one (recover below), so another client's
// command waits behind at most about two calls: bench row 8b, their p99 4-5 ms, where one call
// of 100 at a time gave 4-7 ms and one of 200 10-12 ms. That holds while claims come out in
// about the processing list's order (an envelope's id sorts by time). Claims that share a score
// (leased in one millisecond) come out in member order; raw values that sort otherwise make
// each LREM scan far into the list: ~40 ms a call of 100 with 100,000 items in processing.
const RECOVER_CHUNK = 50;
/** Bounds one pass (200,000 claims), so a huge backlog cannot monopolise an instance. */
const MAX_CHUNKS_PER_PASS = 4000;
/** Processing items adopt.lua reads at most per call. */
const ADOPT_READ = 50_000;

/** What one pass did. */
export interface WatchdogPass {
  recovered: number;
  deadLettered: number;
  claimsAdded: number;
  /** Deliveries of dead instances returned to their queues. */
  reaped: number;
}

/** What the watchdog needs of the rest of the queue capability. */
export interface WatchdogHost {
  readonly client: RedisClient;
  readonly clock: Clock;
  readonly log: Logger;
  readonly metrics?: Metrics;
  readonly instances: Instances;
  readonly settler: Settler;
  /** Every declared queue, as this instance knows them now. */
  queues(): QueueConfig[];
  /** Told when a recovered item waits in a queue's delayed set until `dueMs`. */
  delayed(config: QueueConfig, dueMs: number): void;
}

export class Watchdog {
  private timer?: Timer;
  private running?: Promise<WatchdogPass>;

  constructor(
    private readonly host: WatchdogHost,
    private readonly intervalMs: number,
  ) {}

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  private schedule(): void {
    this.timer = this.host.clock.setTimer(this.intervalMs, async () => {
      try {
        await this.pass();
      } catch (err) {
        this.host.log.warn("watchdog pass failed", { err });
      }
      if (this.timer) this.schedule();
    });
  }

  /** Runs one pass (one at a time per instance). */
  pass(): Promise<WatchdogPass> {
    this.running ??= this.passOnce().finally(() => (this.running = undefined));
    return this.running;
  }

  private async passOnce(): Promise<WatchdogPass> {
    const { instances } = this.host;
    const total: WatchdogPass = { recovered: 0, deadLettered: 0, claimsAdded: 0, reaped: 0 };
    await instances.beat();
    const reliable = this.host.queues().filter((c) => c.mode === "reliable");
    for (const dead of await instances.claimDead()) {
      for (const config of reliable) total.reaped += await this.reap(config, dead);
      await this.retire(dead);
      await instances.forget(dead);
      this.host.log.warn("returned the deliveries of an instance that stopped beating", { instance: dead, items: total.reaped });
    }
    for (const config of reliable) {
      if (config.recoverySet) await this.recover(config, total);
    }
    if (total.recovered + total.deadLettered + total.claimsAdded + total.reaped > 0) this.host.log.info("watchdog pass", { ...total });
    return total;
  }

  /**
   * Takes dead instance `owner`'s consumer out of every group of every STREAM
   * queue, where it holds nothing: a stopping instance does so itself, a crashed
   * one cannot, and no reclaim would ever find one that held nothing. One that
   * holds entries stays: they are reclaimed after min_idle, and the lease call
   * that reclaims them retires it then (stream-lease.lua).
   */
  private async retire(owner: string): Promise<void> {
    for (const config of this.host.queues()) {
      if (config.mode !== "stream") continue;
      for (const group of config.groups) {
        await retireConsumer(this.host.client, config.name, group.name, owner).catch((err: unknown) =>
          this.host.log.warn("could not retire a dead instance's stream consumer", { queue: config.name, group: group.name, instance: owner, err }),
        );
      }
    }
  }

  /** Returns every delivery dead instance `owner` held on the queue; resolves to how many. */
  private async reap(config: QueueConfig, owner: string): Promise<number> {
    let n = 0;
    for await (const fields of this.host.instances.deliveriesOf(keysOf(config).leases, owner)) {
      const results = await this.host.settler.settleMany(config, fields.map((delivery) => ({ action: "return" as const, delivery })));
      n += results.filter((r) => r.code === "done" || r.code === "dead_lettered").length;
    }
    return n;
  }

  private async recover(config: QueueConfig, total: WatchdogPass): Promise<void> {
    const { client, clock } = this.host;
    const metrics = this.host.metrics ?? noMetrics;
    const keys = keysOf(config);
    const reason = `not settled within min_idle (${config.minIdleMs / 1000} s): recovered by the watchdog`;
    const call = () =>
      recoverStale(client, keys, {
        now: clock.now(), minIdleMs: config.minIdleMs, limit: RECOVER_CHUNK, maxDeliveries: config.maxDeliveries,
        retryPolicy: policyArg(config.retryPolicy), publishTtlMs: config.publishTtlMs, reason,
      });
    const count = (r: RecoverResult) => {
      total.recovered += r.recovered;
      total.deadLettered += r.deadLettered;
      if (r.recovered) metrics.items(config.name, "recovered", r.recovered);
      if (r.deadLettered) metrics.items(config.name, "dead_lettered", r.deadLettered);
      if (r.earliestDueMs > 0) this.host.delayed(config, r.earliestDueMs);
    };
    // One call stays in flight ahead of the one awaited, so Redis never idles for a round trip
    // between them. Redis runs them one after the other, and each takes the claims still stale
    // when it runs. The call ahead of the last full one finds few or none, and is counted too.
    let current = call();
    for (let calls = 1; ; ) {
      const ahead = calls < MAX_CHUNKS_PER_PASS ? (calls++, call()) : undefined;
      // Its failure is taken where it is awaited (or dropped after an earlier one's failure), never unhandled.
      ahead?.catch(() => undefined);
      let r: RecoverResult;
      try {
        r = await current;
      } catch (err) {
        // This call's outcome is unknown (a timed-out call may have run); the one ahead of it
        // ran or failed on its own, and what it recovered is counted before the pass fails.
        const late = await ahead?.catch(() => undefined);
        if (late) count(late);
        throw err;
      }
      count(r);
      if (!ahead) break;
      if (r.seen < RECOVER_CHUNK) {
        count(await ahead);
        break;
      }
      current = ahead;
    }
    total.claimsAdded += (await adoptOrphans(client, keys, clock.now(), ADOPT_READ)).added;
  }
}
