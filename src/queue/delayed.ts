/**
 * Moves the due items of queues' delayed sets onto their queues (promote.lua:
 * atomic, so of instances doing it at once each item moves exactly once).
 * Each instance keeps, per queue, the earliest due time it knows of, learnt
 * from its own enqueues, retries and recoveries, and arms one timer for the
 * earliest of all; a look at every queue's delayed set each `scanIntervalMs`
 * covers items that another instance delayed and then did not move (it died).
 */
import type { Clock, Timer } from "../clock.js";
import type { Logger } from "../log.js";
import type { RedisClient } from "../redis/connection.js";
import { promoteDue } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";

/**
 * Items moved per promote.lua call: 200 keep a call near a millisecond, so other
 * clients' commands (a raw LPUSH producer) never wait long behind a burst of due
 * items (bench row 10: with 1000 a raw LPUSH waited up to 5-7 ms, with 200 about 3 ms).
 */
const PROMOTE_CHUNK = 200;
/** promote.lua calls one instance sends at once while a backlog of due items lasts. */
const PROMOTE_IN_FLIGHT = 4;

export class DelayedItems {
  /** Queue → the earliest due time known. */
  private readonly due = new Map<string, number>();
  private timer?: Timer;
  private timerAtMs = Infinity;
  private scanTimer?: Timer;
  private running = false;
  private stopped = true;

  constructor(
    private readonly client: RedisClient,
    private readonly clock: Clock,
    /** Every declared queue, and one by name (undefined once deleted). */
    private readonly configs: { all(): QueueConfig[]; get(name: string): QueueConfig | undefined },
    private readonly scanIntervalMs: number,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.stopped = false;
    this.scheduleScan(0);
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
    this.scanTimer?.cancel();
    this.timer = this.scanTimer = undefined;
    this.timerAtMs = Infinity;
  }

  /** An item of `queue` waits in its delayed set until `dueMs`. */
  note(queue: string, dueMs: number): void {
    if (dueMs <= 0) return;
    const known = this.due.get(queue);
    if (known !== undefined && known <= dueMs) return;
    this.due.set(queue, dueMs);
    this.arm(dueMs);
  }

  private arm(atMs: number): void {
    if (this.stopped || atMs >= this.timerAtMs) return;
    this.timer?.cancel();
    this.timerAtMs = atMs;
    this.timer = this.clock.setTimer(Math.max(0, atMs - this.clock.now()), () => {
      this.timer = undefined;
      this.timerAtMs = Infinity;
      void this.moveDue();
    });
  }

  /** Moves every queue's due items; re-arms for the earliest still waiting. */
  private async moveDue(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const now = this.clock.now();
      for (const [queue, dueMs] of [...this.due]) {
        if (dueMs > now) continue;
        this.due.delete(queue);
        const config = this.configs.get(queue);
        if (!config) continue;
        try {
          await this.promote(config, now);
        } catch (err) {
          this.log.warn("could not move due items onto their queue; trying again", { queue, err });
          this.due.set(queue, now + 1000);
        }
      }
    } finally {
      this.running = false;
      const earliest = Math.min(...this.due.values());
      if (Number.isFinite(earliest)) this.arm(earliest);
    }
  }

  /**
   * Moves the queue's due items: one call, then, while calls come back full, up to
   * PROMOTE_IN_FLIGHT at once on the connection (each still atomic and short, so a
   * burst costs few round trips and others wait behind one call at most).
   */
  private async promote(config: QueueConfig, now: number): Promise<void> {
    const keys = keysOf(config);
    for (let inFlight = 1; ; inFlight = PROMOTE_IN_FLIGHT) {
      const results = await Promise.all(Array.from({ length: inFlight }, () => promoteDue(this.client, keys, now, PROMOTE_CHUNK, config.publishTtlMs)));
      // Answered in order: the last says what is left.
      const { nextDueMs } = results[results.length - 1];
      if (results.some((r) => r.moved < PROMOTE_CHUNK) || nextDueMs === 0 || nextDueMs > now) {
        if (nextDueMs > 0) this.note(config.name, nextDueMs);
        return;
      }
    }
  }

  private scheduleScan(delayMs: number): void {
    if (this.stopped) return;
    this.scanTimer = this.clock.setTimer(delayMs, async () => {
      await this.scan().catch((err: unknown) => this.log.warn("could not read delayed sets", { err }));
      this.scheduleScan(this.scanIntervalMs);
    });
  }

  /** Learns the earliest due time of every queue's delayed set. */
  async scan(): Promise<void> {
    const configs = this.configs.all();
    const firsts = await Promise.all(configs.map((c) => this.client.zrange(keysOf(c).delayed, 0, 0, "WITHSCORES")));
    configs.forEach((c, i) => {
      if (firsts[i].length === 2) this.note(c.name, Number(firsts[i][1]));
    });
  }
}
