/** A cancellable timer handle. */
export interface Timer {
  cancel(): void;
}

/**
 * Time as Switchyard sees it. Every claim score, lease deadline and timer goes
 * through a Clock, so production follows Redis's clock and tests move time by hand.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Calls `fn` once after `ms` of this clock's time. */
  setTimer(ms: number, fn: () => unknown): Timer;
}

/** setTimeout's longest delay, 2^31 - 1 ms (24.8 days): Node fires a longer one after 1 ms. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** The host's own clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    let handle: ReturnType<typeof setTimeout>;
    // A longer wait (a yearly cron tick) goes in steps, or it would fire at once.
    const arm = (left: number) => {
      handle = left > MAX_TIMEOUT_MS ? setTimeout(() => arm(left - MAX_TIMEOUT_MS), MAX_TIMEOUT_MS) : setTimeout(fn, Math.max(0, left));
      handle.unref();
    };
    arm(ms);
    return { cancel: () => clearTimeout(handle) };
  },
};

/**
 * A host clock corrected by its measured offset to a reference clock (Redis's
 * TIME in production), so hosts whose wall clocks disagree still agree on claim
 * times and fire a tick at one moment. Timers are relative, so the host runs them.
 */
export class SyncedClock implements Clock {
  private offsetMs = 0;

  constructor(private readonly host: Clock = systemClock) {}

  /** Measures the offset to `reference` (ms since the epoch), halving the round trip. */
  async sync(reference: () => Promise<number>): Promise<void> {
    const before = this.host.now();
    const ref = await reference();
    const after = this.host.now();
    this.offsetMs = ref - (before + after) / 2;
  }

  now(): number {
    return Math.round(this.host.now() + this.offsetMs);
  }

  setTimer(ms: number, fn: () => unknown): Timer {
    return this.host.setTimer(ms, fn);
  }
}

/** Redis's clock, from TIME, in ms since the epoch. */
export function redisTime(time: () => Promise<(string | number)[]>): () => Promise<number> {
  return async () => {
    const [seconds, micros] = await time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };
}

interface PendingTimer {
  at: number;
  seq: number;
  fn: () => unknown;
  cancelled: boolean;
}

/**
 * A clock that moves only when told to. `advance` fires due timers in time
 * order and waits for the promises they return, so a test that advances past
 * min_idle can assert on the watchdog's result straight after.
 */
export class ManualClock implements Clock {
  private timers: PendingTimer[] = [];
  private seq = 0;

  constructor(private current = Date.UTC(2026, 0, 1)) {}

  now(): number {
    return this.current;
  }

  setTimer(ms: number, fn: () => unknown): Timer {
    const timer: PendingTimer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.timers.push(timer);
    return { cancel: () => void (timer.cancelled = true) };
  }

  /** Timers set and neither fired nor cancelled. */
  get pending(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    for (;;) {
      this.timers = this.timers.filter((t) => !t.cancelled);
      const due = this.timers
        .filter((t) => t.at <= target)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers.splice(this.timers.indexOf(due), 1);
      this.current = Math.max(this.current, due.at);
      await due.fn();
    }
    this.current = target;
  }
}

/** A clock `skewMs` ahead of (or behind) another, as a host whose wall clock is off would be. */
export class SkewedClock implements Clock {
  constructor(
    private readonly base: Clock,
    private readonly skewMs: number,
  ) {}

  now(): number {
    return this.base.now() + this.skewMs;
  }

  setTimer(ms: number, fn: () => unknown): Timer {
    return this.base.setTimer(ms, fn);
  }
}
