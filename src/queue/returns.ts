/**
 * Gives deliveries back to their queue — a closed stream's unsettled items
 * (counted as a delivery), items no stream could take (uncounted) — or to its
 * dead letters (an item no message to a worker can carry), and keeps
 * trying until Redis has taken them. A return that fails is never only logged:
 * it is tried again, with backoff, for as long as this instance lives (and if
 * it dies first, another instance returns them: see instances.ts).
 */
import type { Logger } from "../log.js";
import type { SettleAction, SettleResult } from "../redis/scripts.js";
import type { QueueConfig } from "./declaration.js";
import type { Settler } from "./settler.js";

type ReturnAction = Extract<SettleAction, "return" | "undo" | "kill">;

/** How one delivery goes back: its action and, for a kill, why. */
interface Way {
  action: ReturnAction;
  reason: string;
}

/** Waits between attempts: from 100 ms doubling to 2 s. */
const FIRST_WAIT_MS = 100;
const MAX_WAIT_MS = 2000;

export class Returns {
  /** Queue → delivery field → how it goes back: what is not back yet. */
  private readonly waiting = new Map<string, Map<string, Way>>();
  private retryTimer?: ReturnType<typeof setTimeout>;
  private waitMs = FIRST_WAIT_MS;
  /** Set by stop(): an attempt still in flight then is not tried again when it fails. */
  private stopped = false;
  private idleWaiters: ((back: boolean) => void)[] = [];
  /** Attempts sent and not yet answered. */
  private inFlight = 0;

  constructor(
    private readonly settler: Settler,
    /** The current declaration of a queue, or undefined once it is deleted (its returns are then dropped). */
    private readonly configOf: (queue: string) => QueueConfig | undefined,
    private readonly log: Logger,
  ) {}

  /**
   * Returns `fields` (in this order) of `config`'s queue (a kill: to its dead
   * letters with `reason`). Resolves after the first attempt, whether it took
   * or not, to its results (one per field, in order), or undefined when Redis
   * could not be asked: what did not take is tried again.
   */
  async give(config: QueueConfig, fields: readonly string[], action: ReturnAction, reason = ""): Promise<SettleResult[] | undefined> {
    if (fields.length === 0) return [];
    let waiting = this.waiting.get(config.name);
    if (!waiting) this.waiting.set(config.name, (waiting = new Map()));
    const way = { action, reason };
    for (const f of fields) waiting.set(f, way);
    return this.attempt(config, fields.map((f) => [f, way] as const));
  }

  /** Whether delivery `field` of `queue` is on its way back. */
  has(queue: string, field: string): boolean {
    return this.waiting.get(queue)?.has(field) ?? false;
  }

  /** How many deliveries are not back yet. */
  get size(): number {
    let n = 0;
    for (const w of this.waiting.values()) n += w.size;
    return n;
  }

  /**
   * Resolves to true once nothing waits to go back; to false after `timeoutMs`
   * (wall time), or as soon as what waits never will go back from here: once
   * stopped, with no attempt in flight (a second stop() of the instance then
   * does not wait out its time again).
   */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.size === 0) return Promise.resolve(true);
    if (this.givenUp()) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.idleWaiters.push((back) => {
        clearTimeout(timer);
        resolve(back);
      });
    });
  }

  /**
   * Stops retrying (the instance is going away): what is not back by now is left to another
   * instance (instances.ts), including what an attempt still in flight fails to return.
   */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    if (this.givenUp()) this.notifyIdle(false);
  }

  /** Something waits to go back, and nothing will try to return it: stopped, with no attempt in flight. */
  private givenUp(): boolean {
    return this.stopped && this.inFlight === 0 && this.size > 0;
  }

  private async attempt(config: QueueConfig, ops: readonly (readonly [string, Way])[]): Promise<SettleResult[] | undefined> {
    this.inFlight++;
    try {
      return await this.tryOnce(config, ops);
    } finally {
      this.inFlight--;
      if (this.givenUp()) this.notifyIdle(false);
    }
  }

  private async tryOnce(config: QueueConfig, ops: readonly (readonly [string, Way])[]): Promise<SettleResult[] | undefined> {
    try {
      const results = await this.settler.settleMany(config, ops.map(([delivery, { action, reason }]) => ({ action, delivery, reason })));
      // Every code is final: returned, or no longer live (settled, returned or recovered meanwhile).
      const waiting = this.waiting.get(config.name);
      for (const [f] of ops) waiting?.delete(f);
      if (waiting?.size === 0) this.waiting.delete(config.name);
      this.waitMs = FIRST_WAIT_MS;
      if (this.size === 0) this.notifyIdle(true);
      return results;
    } catch (err) {
      if (this.stopped) {
        this.log.warn("could not return items to their queue; this instance stopped, another will return them", { queue: config.name, items: ops.length, err });
        return undefined;
      }
      this.log.warn("could not return items to their queue; trying again", { queue: config.name, items: ops.length, err });
      this.scheduleRetry();
      return undefined;
    }
  }

  private scheduleRetry(): void {
    if (this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.retryAll();
    }, this.waitMs);
    this.retryTimer.unref();
    this.waitMs = Math.min(this.waitMs * 2, MAX_WAIT_MS);
  }

  private async retryAll(): Promise<void> {
    for (const [queue, waiting] of [...this.waiting]) {
      if (this.stopped) return;
      const config = this.configOf(queue);
      if (!config) {
        this.waiting.delete(queue);
        continue;
      }
      await this.attempt(config, [...waiting]);
    }
    if (this.size === 0) this.notifyIdle(true);
  }

  private notifyIdle(back: boolean): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w(back);
  }
}
