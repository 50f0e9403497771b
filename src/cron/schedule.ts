/**
 * Schedules (SPEC C3, C14, I1): six-field cron with seconds, `#` + five
 * fields, gcron's `@hourly @daily @weekly @monthly @yearly` (and `@midnight`,
 * `@annually`; stored as the six fields they stand for), or
 * `@every <duration>`, in an IANA time zone. Parsing either gives a
 * Schedule or INVALID_ARGUMENT "invalid cron expression: …".
 *
 * Daylight saving (pinned by tests and documented in the README): a
 * wall-clock time skipped by a spring-forward gap fires at the first valid
 * time after the gap (02:30 → 03:00), as croner computes it; a time repeated
 * by a fall-back overlap fires once, at its first occurrence, unless the
 * schedule's minute or hour field is a wildcard (`*`, `*\/15`): such a job
 * runs on every real minute or hour through the overlap (Vixie cron's rule).
 * croner repeats `0 20,40 2 * * *` in the second 02:xx, so nextFire skips it.
 */
import { Cron } from "croner";
import { SwitchyardError, invalid } from "../errors.js";

/** A parsed schedule. */
export type Schedule =
  | { kind: "cron"; expression: string; timeZone: string; cron: Cron; fixedTime: boolean }
  | { kind: "every"; expression: string; intervalMs: number };

/** INVALID_ARGUMENT, reason INVALID_SCHEDULE, naming the schedule field. */
function invalidSchedule(message: string): SwitchyardError {
  return new SwitchyardError("invalid_argument", message, { reason: "INVALID_SCHEDULE", violations: [{ field: "schedule", description: message }] });
}

/** gcron's predefined schedules (SPEC C3), as the six fields they stand for. */
const NICKNAMES: Record<string, string> = {
  "@yearly": "0 0 0 1 1 *",
  "@annually": "0 0 0 1 1 *",
  "@monthly": "0 0 0 1 * *",
  "@weekly": "0 0 0 * * 0",
  "@daily": "0 0 0 * * *",
  "@midnight": "0 0 0 * * *",
  "@hourly": "0 0 * * * *",
};

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const MIN_INTERVAL_MS = 1000;
/** The longest interval, 10 years (as an Enqueue's delay): its fire times stay far inside a Timestamp's range (year 9999). */
const MAX_INTERVAL_MS = 10 * 365 * 86_400_000;

/** Parses "@every 90s", "@every 1h30m", "@every 6000s" into ms. */
function parseEvery(text: string): number {
  const body = text.trim();
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;
  let total = 0;
  let consumed = 0;
  for (let m = re.exec(body); m; m = re.exec(body)) {
    total += Number(m[1]) * UNITS[m[2]];
    consumed = re.lastIndex;
  }
  if (consumed === 0 || consumed !== body.length) {
    throw invalidSchedule(`invalid cron expression: "@every ${body}": write a duration such as 30s, 5m, 1h30m or 6000s`);
  }
  if (total < MIN_INTERVAL_MS) throw invalidSchedule(`invalid cron expression: "@every ${body}": the interval must be at least 1s`);
  if (!(total <= MAX_INTERVAL_MS)) throw invalidSchedule(`invalid cron expression: "@every ${body}": the interval must be at most 10 years (87600h)`);
  return Math.round(total);
}

/** Throws INVALID_ARGUMENT unless `timeZone` is an IANA zone this runtime knows. */
export function checkTimeZone(timeZone: string): void {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone });
  } catch {
    throw invalid(`unknown time zone "${timeZone}"; use an IANA name such as Europe/Berlin or UTC`, "time_zone");
  }
}

/**
 * croner 11 gives every pattern a table of 10,000 years (80 KB), which it
 * reads only when the pattern names years (`starYear` false). Ours never do:
 * croner adds the year field as "*". The table is dropped, or 10,000 mounted
 * jobs would hold 800 MB, and every garbage collection would pay for it (bench
 * row 9). Should croner's internals change shape, this does nothing, and
 * test/cron/schedule-memory.test.ts fails.
 */
function dropYearTable(cron: Cron): void {
  const pattern = (cron as unknown as { _states?: { pattern?: { starYear?: unknown; year?: unknown } } })._states?.pattern;
  if (pattern?.starYear === true && Array.isArray(pattern.year)) pattern.year = [];
}

/** Parses a schedule; throws INVALID_ARGUMENT saying what is wrong. */
export function parseSchedule(text: string, timeZone = "UTC"): Schedule {
  const trimmed = text.trim().replace(/\s+/g, " ");
  if (trimmed.startsWith("@every")) {
    const intervalMs = parseEvery(trimmed.slice("@every".length));
    return { kind: "every", expression: `@every ${trimmed.slice("@every".length).trim()}`, intervalMs };
  }
  checkTimeZone(timeZone);
  let fields: string[];
  if (trimmed.startsWith("@")) {
    const nickname = NICKNAMES[trimmed.toLowerCase()];
    if (!nickname) {
      throw invalidSchedule(`invalid cron expression: "${text}": use one of ${Object.keys(NICKNAMES).join(" ")} or "@every <duration>"`);
    }
    fields = nickname.split(" ");
  } else if (trimmed.startsWith("#")) {
    fields = trimmed.slice(1).trim().split(" ").filter(Boolean);
    if (fields.length !== 5) {
      throw invalidSchedule(`invalid cron expression: "${text}": after "#" write 5 fields (minute hour day month weekday)`);
    }
    fields = ["0", ...fields];
  } else {
    fields = trimmed.split(" ").filter(Boolean);
    if (fields.length !== 6) {
      throw invalidSchedule(
        `invalid cron expression: "${text}": write 6 fields (second minute hour day month weekday), ` +
          `or "#" and 5 fields, or "@every <duration>"`,
      );
    }
  }
  const expression = fields.join(" ");
  try {
    const cron = new Cron(expression, { timezone: timeZone, paused: true });
    dropYearTable(cron);
    if (!cron.nextRun(new Date(0))) throw new Error("it never fires");
    // Fixed minute and hour: a wall time repeated by a fall-back overlap fires once.
    const fixedTime = !fields[1].startsWith("*") && !fields[2].startsWith("*");
    return { kind: "cron", expression, timeZone, cron, fixedTime };
  } catch (err) {
    throw invalidSchedule(`invalid cron expression: "${text}": ${err instanceof Error ? err.message : String(err)}`);
  }
}

const wallClocks = new Map<string, Intl.DateTimeFormat>();

/** `timeZone`'s offset from UTC at `ms`, in ms (its wall clock minus UTC). */
function offsetAt(timeZone: string, ms: number): number {
  let format = wallClocks.get(timeZone);
  if (!format) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric",
    });
    wallClocks.set(timeZone, format);
  }
  const p = Object.fromEntries(format.formatToParts(ms).map((x) => [x.type, Number(x.value)]));
  return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) - (ms - (ms % 1000 + 1000) % 1000);
}

/** Whether the wall time at `ms` already occurred earlier, before a fall-back overlap turned the clock back. */
function repeatedWallTime(timeZone: string, ms: number): boolean {
  if (timeZone === "UTC") return false;
  const now = offsetAt(timeZone, ms);
  const back = offsetAt(timeZone, ms - 3 * 3_600_000) - now; // how far a change within the last 3 h turned the clock back
  return back > 0 && offsetAt(timeZone, ms - back) === now + back;
}

/** The first fire time strictly after `afterMs`, or undefined if there is none. */
export function nextFire(schedule: Schedule, afterMs: number): number | undefined {
  if (schedule.kind === "every") return afterMs + schedule.intervalMs;
  let next = schedule.cron.nextRun(new Date(afterMs))?.getTime();
  // The second occurrence of a repeated wall time is skipped (bounded: an overlap holds at most a few hours of ticks).
  for (let i = 0; i < 10_000 && next !== undefined && schedule.fixedTime && repeatedWallTime(schedule.timeZone, next); i++) {
    next = schedule.cron.nextRun(new Date(next))?.getTime();
  }
  return next;
}

/** Up to `n` fire times after `afterMs`. */
export function nextFires(schedule: Schedule, afterMs: number, n: number): number[] {
  const out: number[] = [];
  let t = afterMs;
  while (out.length < n) {
    const next = nextFire(schedule, t);
    if (next === undefined) break;
    out.push(next);
    t = next;
  }
  return out;
}

/** The last instant a protobuf Timestamp can hold (9999-12-31T23:59:59.999Z). */
const LATEST_MS = 253_402_300_799_999;

/** Fire times a preview returns when the request names no count, and the most it may ask for. */
export const DEFAULT_PREVIEW = 5;
export const MAX_PREVIEW = 50;

/**
 * A schedule checked as a job's would be (PreviewSchedule): its normalised
 * text and its next `count` fire times after `afterMs`. Throws
 * INVALID_ARGUMENT saying what is wrong.
 */
export function previewSchedule(text: string, timeZone: string, count: number, afterMs: number): { schedule: string; fireTimes: number[] } {
  if (!text.trim()) throw invalidSchedule(`schedule is required: "s m h dom mon dow", "# m h dom mon dow" or "@every <duration>"`);
  if (!Number.isInteger(count) || count < 0 || count > MAX_PREVIEW) {
    throw invalid(`count must be between 0 and ${MAX_PREVIEW} (0 means ${DEFAULT_PREVIEW})`, "count");
  }
  if (!Number.isFinite(afterMs) || afterMs < 0 || afterMs > LATEST_MS) {
    throw invalid("start_time must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z", "start_time");
  }
  checkTimeZone(timeZone || "UTC"); // as a job's: an interval ignores it, but a later cron schedule would not
  const schedule = parseSchedule(text, timeZone || "UTC");
  const fireTimes = nextFires(schedule, afterMs, count || DEFAULT_PREVIEW).filter((t) => t <= LATEST_MS);
  return { schedule: schedule.expression, fireTimes };
}
