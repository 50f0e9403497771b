/**
 * What a queue model history shares (see queues.test.ts): the queues it runs
 * on, the history under way, and the look that compares the system with the
 * model, polled until they agree.
 */
import * as grpc from "@grpc/grpc-js";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { expect } from "vitest";
import { QueueMode, type QueueSchema } from "../../../src/gen/switchyard/v1/queue_pb.js";
import { deliveryField, parseToken } from "../../../src/queue/token.js";
import { below } from "../../helpers/random.js";
import type { Arrival, Item, Model, QueueModel } from "./model.js";
import { HEARTBEAT_MS, type World } from "./world.js";

export const MIN_IDLE_MS = 10_000;
export const JITTER = 0.2;
export const R = "{mr}"; // reliable, recovery set, retry policy with backoff, 4 deliveries
export const N = "{mn}"; // reliable, no recovery set, retries at once, 3 deliveries
export const S = "{ms}"; // simple
export const QUEUES = [R, N, S];
export const SLOTS = 3;

export const declarations: Record<string, MessageInitShape<typeof QueueSchema>> = {
  [R]: {
    name: R, mode: QueueMode.RELIABLE, recoverySet: `${R}.claims`, minIdle: durationFromMs(MIN_IDLE_MS), maxDeliveries: 4,
    retryPolicy: { initialBackoff: durationFromMs(2000), multiplier: 2, maxBackoff: durationFromMs(8000), jitter: JITTER },
  },
  [N]: { name: N, mode: QueueMode.RELIABLE, maxDeliveries: 3 },
  [S]: { name: S, mode: QueueMode.SIMPLE },
};

export function queueModels(): Map<string, QueueModel> {
  return new Map<string, QueueModel>([
    [R, { name: R, reliable: true, recovery: true, minIdleMs: MIN_IDLE_MS, maxDeliveries: 4, backoff: (n) => Math.min(2000 * 2 ** (n - 1), 8000), paused: false }],
    [N, { name: N, reliable: true, recovery: false, minIdleMs: 0, maxDeliveries: 3, backoff: () => 0, paused: false }],
    [S, { name: S, reliable: false, recovery: false, minIdleMs: 0, maxDeliveries: 0, backoff: () => 0, paused: false }],
  ]);
}

export const env = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);
export const oneSeed = process.env.SWITCHYARD_MODEL_SEED;
export const RUNS = env("SWITCHYARD_MODEL_RUNS", oneSeed ? 1 : 3);
export const STEPS = env("SWITCHYARD_MODEL_STEPS", 40);
export const FIRST_SEED = oneSeed ? Number(oneSeed) : 1;

/** One history under way. */
export interface Run {
  seed: number;
  next: () => number;
  world: World;
  model: Model;
  history: string[];
  t0: number;
  /** Deliveries taken from sessions and not yet in the model. */
  pending: Arrival[];
  /** Session → tokens whose settle on the stream must come back refused. */
  refusals: Map<number, Set<string>>;
  /** Session → tokens whose extend on the stream must come back done. */
  extends: Map<number, Set<string>>;
  /** Settle results already looked at, per session. */
  seen: Map<number, number>;
  /** Session → tokens of reliable deliveries settled on its stream (ack, retry, drop), whose answer may still be on its way. */
  sent: Map<number, Set<string>>;
  /**
   * Tokens whose settle applied (the model saw it) while its answer may have been lost by a reset of
   * its instance's Redis connections: UNAVAILABLE ("may or may not have taken effect") is a fair result.
   */
  answerLost: Set<string>;
  /** Failures that no later poll can mend. */
  hard: string[];
  delivered: number;
  /** Deliveries with a count above 1. */
  redelivered: number;
}

export class ModelFailure extends Error {}

export const pick = <T>(r: Run, xs: readonly T[]): T => xs[below(r.next, xs.length)];
export const chance = (r: Run, p: number) => r.next() < p;
export const now = (r: Run) => r.world.clock.now();
export const rel = (r: Run, t: number) => `+${t - r.t0}`;
export const ms = (ts: Parameters<typeof timestampMs>[0] | undefined) => (ts ? timestampMs(ts) : 0);
export const errorCode = (p: Promise<unknown>) => p.then(() => 0, (e: grpc.ServiceError) => e.code ?? -1);

export function drainArrivals(r: Run): void {
  for (const s of r.world.sessions) {
    for (const d of s.arrived.splice(0)) {
      r.pending.push({
        session: s.id, queue: s.queue, token: d.leaseToken, field: deliveryField(parseToken(d.leaseToken)),
        key: Buffer.from(d.payload).toString("hex"), count: d.deliveryCount, killedAt: s.inst.killedAt,
      });
    }
  }
}

/** Settle results on streams: the refusals and extends expected that came, and any refusal nobody expected (hard). */
export function resultProblems(r: Run): string[] {
  const out: string[] = [];
  for (const s of r.world.sessions) {
    const refused = r.refusals.get(s.id) ?? new Set<string>();
    const extended = r.extends.get(s.id) ?? new Set<string>();
    const from = r.seen.get(s.id) ?? 0;
    for (const res of s.results.slice(from)) {
      if (res.code === 0) {
        extended.delete(res.leaseToken);
        continue;
      }
      if (refused.delete(res.leaseToken)) continue;
      if (res.code === grpc.status.UNAVAILABLE && r.answerLost.delete(res.leaseToken)) {
        // The instance holds it again until its recheck finds it settled: its credit may stay taken until then.
        s.phantoms.set(res.leaseToken, now(r));
        continue;
      }
      r.hard.push(`session ${s.id}: the settle of live delivery ${res.leaseToken} was refused: ${res.code} ${res.message}`);
    }
    r.seen.set(s.id, s.results.length);
    for (const token of refused) out.push(`session ${s.id}: waiting for the refusal of stale token ${token}`);
    for (const token of extended) out.push(`session ${s.id}: waiting for the result of the extend of ${token}`);
  }
  return out;
}

/** A stream settle whose result must come back (see resultProblems). */
export function awaitResult(map: Map<number, Set<string>>, session: number, token: string): void {
  let set = map.get(session);
  if (!set) map.set(session, (set = new Set()));
  set.add(token);
}

/**
 * SPEC Q8: a stream with open credit gets items while its queue has ready ones. Its
 * instance counts against its credit what it holds, and what was settled through
 * another instance or recovered until its next check of what it holds (reliable).
 */
export function progressProblems(r: Run): string[] {
  const out: string[] = [];
  for (const s of openSessions(r)) {
    for (const [token, since] of s.phantoms) if (now(r) >= since + 2 * HEARTBEAT_MS) s.phantoms.delete(token);
    const q = r.model.queues.get(s.queue)!;
    const free = s.credit - r.model.heldBy(s.id).length - s.phantoms.size;
    if (q.paused || free <= 0) continue;
    const ready = r.model.of(s.queue, "ready");
    if (ready.length > 0) out.push(`session ${s.id} has credit for ${free} more while "${s.queue}" has ready ${describeItems(r, ready)}`);
  }
  return out;
}

/** One look: arrivals and a snapshot against the model; the problems, none once they agree. */
export async function look(r: Run): Promise<string[]> {
  if (r.hard.length > 0) return r.hard;
  const unready = r.world.live().filter((i) => !i.sy.app.redis.ready());
  if (unready.length > 0) return [`waiting for ${unready.map((i) => i.name).join(", ")} to reconnect to Redis`];
  drainArrivals(r);
  const snaps = await r.world.snapshot(QUEUES);
  const credits = new Map(r.world.sessions.map((s) => [s.id, s.maxCredit]));
  const problems = r.model.check(snaps, r.pending, now(r), credits);
  if (problems.length === 0) {
    r.delivered += r.pending.length;
    r.redelivered += r.pending.filter((a) => a.count > 1).length;
    r.pending = [];
    for (const { session, token } of r.model.released.splice(0)) r.world.sessions[session].phantoms.set(token, now(r));
    problems.push(...progressProblems(r));
  }
  return [...problems, ...resultProblems(r), ...r.hard];
}

/** Polls until the model and the system agree twice in a row (what may hold only eventually, after a cut, gets time). */
export async function settle(r: Run): Promise<void> {
  for (let round = 0; round < 2; round++) {
    let last: string[] = [];
    try {
      await expect.poll(async () => (last = await look(r).catch((err: unknown) => [`look failed: ${String(err)}`])), { timeout: 5000, interval: 10 }).toEqual([]);
    } catch {
      throw new ModelFailure(last.join("\n"));
    }
  }
}

export function step(r: Run, text: string): void {
  r.history.push(`${String(r.history.length + 1).padStart(3)}. [${rel(r, now(r))}] ${text}`);
}

export const openSessions = (r: Run) => r.world.sessions.filter((s) => s.open);
export const liveInstance = (r: Run) => (r.world.live().length > 0 ? pick(r, r.world.live()) : undefined);

export function describeItems(r: Run, items: Item[]): string {
  return items.map((i) => r.model.describe(i)).join(" ");
}

/** What a history exercised, to see that its steps did something. */
export function summary(r: Run): string {
  const counts = new Map<string, number>();
  const add = (k: string, n = 1) => counts.set(k, (counts.get(k) ?? 0) + n);
  add("deliveries", r.delivered);
  for (const t of r.model.stale) add(t.why);
  for (const it of r.model.items) add(`items ${it.place}`);
  add("redelivered", r.redelivered);
  return [...counts].map(([k, n]) => `${k} ${n}`).join(", ");
}
