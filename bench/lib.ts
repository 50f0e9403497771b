/** Small helpers shared by the benchmark rows: timing, statistics, bounded waits. */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

export const now = () => performance.now();
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * CPU a process (`/proc/PID/stat`) or thread (`/proc/PID/task/TID/stat`) has used so far, in ms of
 * user and of system time (USER_HZ = 100), and its minor page faults: for the diagnostics.
 */
export function procStat(path: string): { userMs: number; systemMs: number; cpuMs: number; faults: number } {
  const f = readFileSync(path, "utf8").split(") ")[1].split(" ");
  const userMs = Number(f[11]) * 10, systemMs = Number(f[12]) * 10;
  return { userMs, systemMs, cpuMs: userMs + systemMs, faults: Number(f[7]) };
}

/** A payload of exactly `bytes` bytes; when `seq` is given it starts with it (zero-padded, 10 digits). */
export function payload(bytes = 100, seq?: number): Buffer {
  const head = seq === undefined ? "" : String(seq).padStart(10, "0");
  return Buffer.from(head + "x".repeat(bytes - head.length));
}

/** Reads the sequence number written by {@link payload}. */
export function seqOf(p: Uint8Array | string): number {
  const s = typeof p === "string" ? p.slice(0, 10) : Buffer.from(p.buffer, p.byteOffset, 10).toString("latin1");
  return Number(s);
}

export function median(xs: number[]): number {
  return percentile(xs, 50);
}

/** Nearest-rank percentile (p in 0..100). */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** Runs `fn(i)` for i in [0, n) with at most `concurrency` calls in flight. */
export async function pool(n: number, concurrency: number, fn: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < n) await fn(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, lane));
}

/** Polls `cond` every `everyMs` until it holds; throws after `timeoutMs`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what: string, everyMs = 2): Promise<void> {
  const deadline = now() + timeoutMs;
  while (!(await cond())) {
    if (now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** A promise with its resolve function, for "the N-th item arrived". */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((ok, fail) => ((resolve = ok), (reject = fail)));
  return { promise, resolve, reject };
}

/** Rejects if `p` has not settled within `ms`. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, fail) => (timer = setTimeout(() => fail(new Error(`timed out after ${ms} ms: ${what}`)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Redis servers and child processes to kill if the run is interrupted or fails (run.ts does). */
export const leftovers = new Set<{ kill(signal?: NodeJS.Signals): unknown }>();

export const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/**
 * Profiles this process's CPU from now until the returned function is called,
 * which writes a .cpuprofile (read it with bench/profile-summary.mjs). For
 * profiling one phase of a row (e.g. the scheduler's ticks without its set-up).
 */
export async function startCpuProfile(): Promise<(file: string) => Promise<void>> {
  const { Session } = await import("node:inspector");
  const { writeFileSync } = await import("node:fs");
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<unknown>((ok, fail) => session.post(method, params ?? {}, (err, res) => (err ? fail(err) : ok(res))));
  await post("Profiler.enable");
  await post("Profiler.setSamplingInterval", { interval: 500 });
  await post("Profiler.start");
  return async (file: string) => {
    const { profile } = (await post("Profiler.stop")) as { profile: unknown };
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
    log(`wrote CPU profile ${file}`);
  };
}

/**
 * Microseconds on CLOCK_MONOTONIC (libuv's hrtime): one clock for every process
 * on this machine (Python's time.monotonic_ns reads it too), so a time written
 * into a payload by one process can be subtracted from another's.
 */
export function monoUs(): number {
  const [s, ns] = process.hrtime();
  return s * 1e6 + ns / 1e3;
}

/** A benchmark item as users send them: a JSON object of about 100 bytes with a sequence number and a send time (µs, monoUs; 0 for none). */
export interface JsonItem {
  seq: number;
  t: number;
  pad: string;
}

const PAD = "x".repeat(100);

/** An item whose JSON text is 100 bytes for sequence numbers and times of up to 16 digits each. */
export function jsonItem(seq: number, tUs = 0): JsonItem {
  const t = Math.round(tUs);
  const used = `{"seq":${seq},"t":${t},"pad":""}`.length;
  return { seq, t, pad: PAD.slice(0, Math.max(0, 100 - used)) };
}

/** p50, p90, p99 and max of `xs` (nearest rank). */
export interface Spread {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function spread(xs: number[]): Spread {
  const sorted = Float64Array.from(xs).sort();
  const at = (p: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]);
  return { p50: at(50), p90: at(90), p99: at(99), max: sorted.length ? sorted[sorted.length - 1] : NaN };
}
