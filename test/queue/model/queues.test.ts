/**
 * Model-based tests of reliable and simple queues (issue 12, SPEC Q14; issue
 * 14's delays, retries with a delay, pause and resume): seeded histories of
 * random steps against real Redis and real Switchyard instances on one
 * ManualClock, each checked against the reference model (model.ts) after
 * every step.
 *
 * Steps: enqueue (some items delayed), raw LPUSH by a plain Redis client
 * (equal values, non-UTF-8 bytes, values that look like a derived claim);
 * Lease streams on up to three instances with various credits; credit
 * changes; ack, retry (the policy's backoff, or a delay of its own), drop and
 * extend, on the stream or unary through any instance; stale tokens (settled,
 * returned, recovered, reaped, of a deleted queue); stream close and cancel;
 * instance kill (its link to Redis down for good, nothing returned), graceful
 * stop and restart; a cut of instances' Redis connections right after a push;
 * an outage of one instance's Redis while its streams end (their returns wait);
 * a lease whose answer is lost (its connection reset after the script went out);
 * clock advances (watchdog, reaping of dead instances, the delayed mover);
 * pause and resume; purge; delete with purge and declare again. A history
 * ends quiet: streams closed, the clock advanced past every timeout, and
 * nothing may be left in processing. Besides the model's checks (model.ts),
 * every look checks SPEC Q8's progress: a stream with open credit gets items
 * while its queue has ready ones.
 *
 * `npm test` runs 3 histories of 40 steps; SWITCHYARD_MODEL_RUNS and
 * SWITCHYARD_MODEL_STEPS run more, SWITCHYARD_MODEL_SEED=n runs seed n (with
 * SWITCHYARD_MODEL_RUNS, seeds from n on; the
 * steps drawn follow from the seed and what the system did; a failure prints
 * the history it ran; SWITCHYARD_MODEL_PRINT=1 prints every history).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ManualClock } from "../../../src/clock.js";
import { QueueMode, type QueueSchema } from "../../../src/gen/switchyard/v1/queue_pb.js";
import { deliveryField, parseToken } from "../../../src/queue/token.js";
import { below, random } from "../../helpers/random.js";
import { startStandaloneRedis, type StandaloneRedis } from "../../helpers/redis.js";
import { Model, type Arrival, type Item, type Place, type QueueModel } from "./model.js";
import { HEARTBEAT_MS, INSTANCE_TIMEOUT_MS, WATCHDOG_MS, World, killed, type Instance, type Session } from "./world.js";

const MIN_IDLE_MS = 10_000;
const JITTER = 0.2;
const R = "{mr}"; // reliable, recovery set, retry policy with backoff, 4 deliveries
const N = "{mn}"; // reliable, no recovery set, retries at once, 3 deliveries
const S = "{ms}"; // simple
const QUEUES = [R, N, S];
const SLOTS = 3;

const declarations: Record<string, MessageInitShape<typeof QueueSchema>> = {
  [R]: {
    name: R, mode: QueueMode.RELIABLE, recoverySet: `${R}.claims`, minIdle: durationFromMs(MIN_IDLE_MS), maxDeliveries: 4,
    retryPolicy: { initialBackoff: durationFromMs(2000), multiplier: 2, maxBackoff: durationFromMs(8000), jitter: JITTER },
  },
  [N]: { name: N, mode: QueueMode.RELIABLE, maxDeliveries: 3 },
  [S]: { name: S, mode: QueueMode.SIMPLE },
};

function queueModels(): Map<string, QueueModel> {
  return new Map<string, QueueModel>([
    [R, { name: R, reliable: true, recovery: true, minIdleMs: MIN_IDLE_MS, maxDeliveries: 4, backoff: (n) => Math.min(2000 * 2 ** (n - 1), 8000), paused: false }],
    [N, { name: N, reliable: true, recovery: false, minIdleMs: 0, maxDeliveries: 3, backoff: () => 0, paused: false }],
    [S, { name: S, reliable: false, recovery: false, minIdleMs: 0, maxDeliveries: 0, backoff: () => 0, paused: false }],
  ]);
}

const env = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);
const oneSeed = process.env.SWITCHYARD_MODEL_SEED;
const RUNS = env("SWITCHYARD_MODEL_RUNS", oneSeed ? 1 : 3);
const STEPS = env("SWITCHYARD_MODEL_STEPS", 40);
const FIRST_SEED = oneSeed ? Number(oneSeed) : 1;

/** One history under way. */
interface Run {
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
  /** Failures that no later poll can mend. */
  hard: string[];
  delivered: number;
  /** Deliveries with a count above 1. */
  redelivered: number;
}

class ModelFailure extends Error {}

const pick = <T>(r: Run, xs: readonly T[]): T => xs[below(r.next, xs.length)];
const chance = (r: Run, p: number) => r.next() < p;
const now = (r: Run) => r.world.clock.now();
const rel = (r: Run, t: number) => `+${t - r.t0}`;
const ms = (ts: Parameters<typeof timestampMs>[0] | undefined) => (ts ? timestampMs(ts) : 0);
const errorCode = (p: Promise<unknown>) => p.then(() => 0, (e: grpc.ServiceError) => e.code ?? -1);

function drainArrivals(r: Run): void {
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
function resultProblems(r: Run): string[] {
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
      r.hard.push(`session ${s.id}: the settle of live delivery ${res.leaseToken} was refused: ${res.code} ${res.message}`);
    }
    r.seen.set(s.id, s.results.length);
    for (const token of refused) out.push(`session ${s.id}: waiting for the refusal of stale token ${token}`);
    for (const token of extended) out.push(`session ${s.id}: waiting for the result of the extend of ${token}`);
  }
  return out;
}

/** A stream settle whose result must come back (see resultProblems). */
function awaitResult(map: Map<number, Set<string>>, session: number, token: string): void {
  let set = map.get(session);
  if (!set) map.set(session, (set = new Set()));
  set.add(token);
}

/**
 * SPEC Q8: a stream with open credit gets items while its queue has ready ones. Its
 * instance counts against its credit what it holds, and what was settled through
 * another instance or recovered until its next check of what it holds (reliable).
 */
function progressProblems(r: Run): string[] {
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
async function look(r: Run): Promise<string[]> {
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
async function settle(r: Run): Promise<void> {
  for (let round = 0; round < 2; round++) {
    let last: string[] = [];
    try {
      await expect.poll(async () => (last = await look(r).catch((err: unknown) => [`look failed: ${String(err)}`])), { timeout: 5000, interval: 10 }).toEqual([]);
    } catch {
      throw new ModelFailure(last.join("\n"));
    }
  }
}

function step(r: Run, text: string): void {
  r.history.push(`${String(r.history.length + 1).padStart(3)}. [${rel(r, now(r))}] ${text}`);
}

const openSessions = (r: Run) => r.world.sessions.filter((s) => s.open);
const liveInstance = (r: Run) => (r.world.live().length > 0 ? pick(r, r.world.live()) : undefined);

let uid = 0;
/** A payload for a new item: text, non-UTF-8 bytes, or bytes that look like a derived claim member. */
function payload(r: Run, raw: boolean): { value: Buffer; label: string } {
  const n = ++uid;
  const kind = below(r.next, 4);
  if (kind === 0) return { value: Buffer.concat([Buffer.from([0xff, 0xfe, 0x00]), Buffer.from(String(n))]), label: `b${n}` };
  if (kind === 1 && raw) return { value: Buffer.from(`\0SYC${n}@x`), label: `z${n}` };
  return { value: Buffer.from(`${raw ? "r" : "e"}${n}`), label: `${raw ? "r" : "e"}${n}` };
}

function describeItems(r: Run, items: Item[]): string {
  return items.map((i) => r.model.describe(i)).join(" ");
}

async function enqueue(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const q = pick(r, QUEUES);
  const n = 1 + below(r.next, 3);
  const items: Item[] = [];
  const inputs = Array.from({ length: n }, () => {
    const p = payload(r, false);
    const delayMs = chance(r, 0.25) ? pick(r, [500, 3000, 7000]) : 0;
    items.push(r.model.add(q, p.value, p.label, delayMs ? now(r) + delayMs : undefined));
    return delayMs ? { payload: p.value, delayMs } : p.value;
  });
  const ids = await inst.sy.client.enqueue(q, inputs);
  if (ids.length !== n) r.hard.push(`enqueue of ${n} items answered ${ids.length} ids`);
  return `enqueue ${q} via ${inst.name}: ${items.map((i) => r.model.describe(i) + (i.due ? ` delayed until ${rel(r, i.due)}` : "")).join(" ")}`;
}

/** LPUSH by a plain client: new values, or twins of a value already there. */
async function rawPush(r: Run, q = pick(r, QUEUES)): Promise<string> {
  const values: Buffer[] = [];
  const labels: string[] = [];
  const twinOf = r.model.of(q).filter((i) => i.place !== "gone" && /^[rbz]/.test(r.model.label(i.key)));
  for (let n = 1 + below(r.next, 3); n > 0; n--) {
    if (twinOf.length > 0 && chance(r, 0.3)) {
      const value = Buffer.from(pick(r, twinOf).key, "hex");
      values.push(value);
      labels.push(`${r.model.label(value.toString("hex"))} (twin)`);
    } else {
      const p = payload(r, true);
      values.push(p.value);
      labels.push(p.label);
      if (chance(r, 0.3)) {
        values.push(p.value);
        labels.push(`${p.label} (twin)`);
      }
    }
  }
  await r.world.redis.plain.lpush(q, ...values);
  const items = values.map((v, i) => r.model.add(q, v, labels[i].split(" ")[0]));
  return `LPUSH ${q}: ${describeItems(r, items)}`;
}

async function open(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst || openSessions(r).length >= 6) return undefined;
  const q = pick(r, QUEUES);
  const s = await r.world.open(inst, q, 1 + below(r.next, 4));
  return `open session ${s.id} on ${q} at ${inst.name}, credit ${s.credit}`;
}

async function credit(r: Run): Promise<string | undefined> {
  const s = openSessions(r);
  if (s.length === 0) return undefined;
  const session = pick(r, s);
  session.credit = below(r.next, 5);
  session.maxCredit = Math.max(session.maxCredit, session.credit);
  session.lease.setCredit(session.credit);
  return `session ${session.id} credit ${session.credit}`;
}

type Action = "ack" | "retry" | "drop" | "extend";

async function settleOne(r: Run): Promise<string | undefined> {
  const open = new Set(openSessions(r).map((s) => s.id));
  const held = r.model.items.filter((i) => (i.place === "held" || i.place === "inhand") && open.has(i.session!));
  if (held.length === 0) return undefined;
  const it = pick(r, held);
  const s = r.world.sessions[it.session!];
  const q = r.model.queues.get(it.queue)!;
  const action = pick(r, ["ack", "ack", "retry", "retry", "drop", "extend"] as Action[]);
  const unary = chance(r, 0.5);
  const delayMs = unary && action === "retry" && chance(r, 0.5) ? pick(r, [0, 1500, 4000, 9000]) : undefined;
  const via = unary ? pick(r, r.world.live()) : s.inst;
  const token = it.token!;
  const what = `${unary ? `unary via ${via.name}` : `stream ${s.id}`} ${action}${delayMs !== undefined ? ` delay ${delayMs}` : ""} ${r.model.describe(it)}`;
  // What the model expects.
  let expected: { dead: boolean; due?: number; dueMax?: number } = { dead: false };
  if (!q.reliable) {
    if (action !== "extend") {
      it.place = "gone";
      delete it.session;
    }
  } else if (action === "ack" || action === "drop") {
    it.place = "gone";
    r.model.stale.push({ token, queue: q.name, why: action === "ack" ? "acked" : "dropped" });
  } else if (action === "retry") {
    const count = it.count + 1;
    const places = r.model.backPlaces(q, count, delayMs ?? "policy");
    const wait = delayMs ?? q.backoff(count);
    r.model.stale.push({ token, queue: q.name, why: "retried" });
    Object.assign(it, { count, place: places[0] });
    for (const f of ["token", "field", "session", "claimAt"] as const) delete it[f];
    if (places[0] === "dead") expected = { dead: true };
    else if (places[0] === "delayed") {
      it.due = now(r) + (delayMs ?? Math.floor(wait * (1 - JITTER)));
      it.dueMax = now(r) + wait;
      expected = { dead: false, due: it.due, dueMax: it.dueMax };
    } else expected = { dead: false, due: now(r), dueMax: now(r) };
  } else if (q.recovery) {
    it.expectClaim = now(r);
  }
  if (!unary) {
    if (action === "extend" && q.reliable) awaitResult(r.extends, s.id, token);
    s.lease[action](token);
    return what;
  }
  if (q.reliable && via !== s.inst && action !== "extend") s.phantoms.set(token, now(r));
  const c = via.sy.client;
  try {
    if (action === "ack") await c.ack(token);
    else if (action === "drop") await c.drop(token, "model drop");
    else if (action === "extend") {
      const res = await c.extendLease(token);
      if (q.recovery && ms(res.expireTime) !== now(r) + MIN_IDLE_MS) r.hard.push(`${what}: expire_time ${ms(res.expireTime)}, expected ${now(r) + MIN_IDLE_MS}`);
    } else {
      const res = await c.retry(token, { reason: "model retry", delayMs });
      if (q.reliable) {
        const due = ms(res.notBefore);
        const fits = res.deadLettered === expected.dead && (expected.dead ? !res.notBefore : due >= expected.due! && due <= expected.dueMax!);
        if (!fits) r.hard.push(`${what}: answered dead_lettered=${res.deadLettered} not_before=${rel(r, due)}, expected ${JSON.stringify(expected)}`);
        else if (it.place === "delayed") it.due = it.dueMax = due;
      }
    }
  } catch (err) {
    r.hard.push(`${what}: refused: ${(err as Error).message}`);
  }
  return what;
}

async function stale(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst || r.model.stale.length === 0) return undefined;
  const t = pick(r, r.model.stale);
  const action = pick(r, ["ack", "retry", "drop", "extend"] as Action[]);
  const streams = openSessions(r);
  if (streams.length > 0 && chance(r, 0.4)) {
    const s = pick(r, streams);
    awaitResult(r.refusals, s.id, t.token);
    s.lease[action](t.token);
    return `stale ${action} on stream ${s.id} of ${t.token} (${t.why})`;
  }
  const c = inst.sy.client;
  const call = action === "ack" ? c.ack(t.token) : action === "drop" ? c.drop(t.token) : action === "extend" ? c.extendLease(t.token) : c.retry(t.token);
  const code = await errorCode(call);
  if (code !== grpc.status.FAILED_PRECONDITION && code !== grpc.status.NOT_FOUND) {
    r.hard.push(`stale ${action} of ${t.token} (${t.why}) answered code ${code}, not FAILED_PRECONDITION or NOT_FOUND`);
  }
  return `stale unary ${action} via ${inst.name} of ${t.token} (${t.why}): code ${code}`;
}

/** Stops deliveries to sessions before they end, so none is on its way to a worker that goes away. */
async function quiet(r: Run, sessions: Session[]): Promise<void> {
  for (const s of sessions) {
    s.credit = 0;
    s.lease.setCredit(0);
  }
  if (sessions.length > 0) await settle(r);
}

/** Their held items go back (counted): the streams ended. */
function giveBack(r: Run, sessions: Session[], why: string): void {
  for (const s of sessions) {
    s.open = false;
    for (const it of r.model.heldBy(s.id)) {
      if (it.place === "inhand") {
        it.place = "gone";
        continue;
      }
      r.model.stale.push({ token: it.token!, queue: it.queue, why });
      r.model.moveBack(it, r.model.backPlaces(r.model.queues.get(it.queue)!, it.count + 1, 0));
    }
  }
}

async function endSession(r: Run): Promise<string | undefined> {
  const open = openSessions(r);
  if (open.length === 0) return undefined;
  const s = pick(r, open);
  const cancel = chance(r, 0.5);
  await quiet(r, [s]);
  const held = describeItems(r, r.model.heldBy(s.id));
  giveBack(r, [s], cancel ? "stream cancelled" : "stream closed");
  if (cancel) s.lease.cancel();
  else await s.lease.close();
  return `${cancel ? "cancel" : "close"} session ${s.id} holding ${held || "nothing"}`;
}

async function kill(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const sessions = openSessions(r).filter((s) => s.inst === inst);
  await quiet(r, sessions);
  for (const s of sessions) {
    for (const it of r.model.heldBy(s.id)) {
      if (it.place === "inhand") it.place = "gone";
      else it.killedAt = now(r);
    }
  }
  r.world.kill(inst);
  r.model.killed.set(inst.sy.app.queues.instances.id, now(r));
  return `kill ${inst.name} (sessions ${sessions.map((s) => s.id).join(", ") || "none"})`;
}

async function stop(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const sessions = openSessions(r).filter((s) => s.inst === inst);
  await quiet(r, sessions);
  giveBack(r, sessions, "instance stopped");
  await r.world.stop(inst);
  return `stop ${inst.name} gracefully (sessions ${sessions.map((s) => s.id).join(", ") || "none"})`;
}

async function restart(r: Run): Promise<string | undefined> {
  const free = [...Array(SLOTS).keys()].filter((slot) => r.world.instances[slot]?.state !== "live");
  if (free.length === 0) return undefined;
  const inst = await r.world.start(pick(r, free));
  return `start ${inst.name}`;
}

async function cut(r: Run): Promise<string | undefined> {
  const live = r.world.live();
  if (live.length === 0) return undefined;
  const targets = chance(r, 0.5) ? live : [pick(r, live)];
  const pushed = chance(r, 0.7) ? await rawPush(r, pick(r, openSessions(r).map((s) => s.queue).concat(QUEUES))) : "";
  // Each instance's command connection reconnects: wait for that, so later steps' calls find Redis.
  const back = targets.map((inst) => new Promise((ok) => inst.sy.app.redis.client.once("ready", ok)));
  const lost = popsMayBeLost(r, targets);
  for (const inst of targets) inst.link.cut();
  await Promise.all(back);
  return `${pushed ? `${pushed}, then at once ` : ""}cut the Redis connections of ${targets.map((i) => i.name).join(", ")}${lost}`;
}

/**
 * A simple queue's pop whose answer a cut loses has taken its items for good (at most
 * once, SPEC Q3): the ready items of simple queues that streams on `targets` take may go.
 */
function popsMayBeLost(r: Run, targets: Instance[]): string {
  const queues = new Set(openSessions(r).filter((s) => targets.includes(s.inst) && !r.model.queues.get(s.queue)!.reliable).map((s) => s.queue));
  const items = r.model.items.filter((i) => queues.has(i.queue) && i.place === "ready");
  for (const it of items) Object.assign(it, { place: "moving", dests: ["ready", "gone"], leasable: true });
  return items.length > 0 ? ` (a pop cut there loses its items: ${describeItems(r, items)} may go)` : "";
}

/** Items pushed for a stream with credit; the answer to the lease that takes them is lost (its connection reset after the script went out). */
async function lostLease(r: Run): Promise<string | undefined> {
  const streams = openSessions(r).filter((s) => {
    const q = r.model.queues.get(s.queue)!;
    return q.reliable && !q.paused && s.credit > r.model.heldBy(s.id).length;
  });
  if (streams.length === 0) return undefined;
  const s = pick(r, streams);
  const inst = s.inst;
  const sha = (inst.sy.app.redis.client as unknown as { scriptsSet: Record<string, { sha: string }> }).scriptsSet.syLease.sha;
  let lost = false;
  inst.link.drop = (chunk) => !lost && (lost = chunk.includes(sha));
  const back = new Promise((ok) => inst.sy.app.redis.client.once("ready", ok));
  const pushed = await rawPush(r, s.queue);
  // Another instance's stream may take the items first: then no lease of this one is cut.
  await expect.poll(() => lost, { timeout: 1000 }).toBe(true).catch(() => undefined);
  inst.link.drop = undefined;
  if (lost) await back;
  return `${pushed}; ${lost ? `the answer to ${inst.name}'s lease for session ${s.id} is lost` : `(no lease of ${inst.name} went out)`}`;
}

/** An instance loses Redis for a while: streams that end meanwhile cannot return their items at once; they go back once Redis is reachable. */
async function outage(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const sessions = openSessions(r).filter((s) => s.inst === inst && (r.model.heldBy(s.id).length > 0 || chance(r, 0.5)));
  await quiet(r, sessions);
  const held = sessions.map((s) => `${s.id} holding ${describeItems(r, r.model.heldBy(s.id)) || "nothing"}`);
  giveBack(r, sessions, "stream closed in an outage");
  const lost = popsMayBeLost(r, [inst]);
  inst.link.down();
  // The server ends a closed stream once its first return attempt failed.
  await Promise.all(sessions.map((s) => s.lease.close()));
  const back = new Promise((ok) => inst.sy.app.redis.client.once("ready", ok));
  inst.link.up();
  await back;
  return `Redis down for ${inst.name}; close session ${held.join(", ") || "(none)"}; Redis up${lost}`;
}

/** The earliest time by which a watchdog pass (or a mover scan) of a live instance has surely run at or after `t`. */
function servedBy(r: Run, t: number): number {
  return Math.min(...r.world.live().map((i) => Math.max(t, i.startedAt) + 2 * WATCHDOG_MS));
}

/** How far to advance: a plain step, or to just before (or right at) the next due item or claim deadline, where an off-by-one shows. */
function advanceBy(r: Run): number {
  const deadlines = r.model.items.flatMap((i) =>
    i.place === "delayed" && i.due !== undefined ? [i.due] : i.place === "held" && i.claimAt !== undefined ? [i.claimAt + MIN_IDLE_MS] : [],
  ).filter((t) => t > now(r));
  if (deadlines.length === 0 || chance(r, 0.6)) return pick(r, [300, 1000, 2500, 4000, 6000]);
  return Math.max(1, pick(r, deadlines) - now(r) - pick(r, [1, 0]));
}

async function advance(r: Run, by?: number): Promise<string> {
  const ms = by ?? advanceBy(r);
  const target = now(r) + ms;
  for (const it of r.model.items) {
    const q = r.model.queues.get(it.queue)!;
    if (it.place === "held") {
      const places = new Set<Place>();
      const musts: string[] = [];
      if (q.recovery && it.claimAt !== undefined && it.claimAt + MIN_IDLE_MS <= target) {
        for (const p of r.model.backPlaces(q, it.count + 1, "policy")) places.add(p);
        if (servedBy(r, it.claimAt + MIN_IDLE_MS) <= target) musts.push(`claimed at ${rel(r, it.claimAt)}, idle past min_idle`);
      }
      if (it.killedAt !== undefined) {
        if (target >= it.killedAt + INSTANCE_TIMEOUT_MS - 2 * WATCHDOG_MS) {
          for (const p of r.model.backPlaces(q, it.count + 1, 0)) places.add(p);
          if (servedBy(r, it.killedAt + INSTANCE_TIMEOUT_MS) <= target) musts.push(`its instance killed at ${rel(r, it.killedAt)}`);
        }
      }
      if (places.size > 0) it.mayLeave = [...places];
      if (musts.length > 0) it.mustLeave = musts.join("; ");
    } else if (it.place === "delayed" && servedBy(r, it.dueMax ?? it.due!) <= target) {
      it.mustMove = true;
    }
  }
  await r.world.clock.advance(ms);
  return `advance the clock ${ms} ms`;
}

async function pauseOrResume(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const q = r.model.queues.get(pick(r, QUEUES))!;
  if (q.paused) {
    q.paused = false;
    await inst.sy.client.resumeQueue(q.name);
    return `resume ${q.name} via ${inst.name}`;
  }
  await inst.sy.client.pauseQueue(q.name);
  await expect.poll(() => r.world.live().every((i) => i.sy.app.queues.registry.cached(q.name)?.paused)).toBe(true);
  await settle(r); // deliveries leased before the pause reached every instance may still arrive
  q.paused = true;
  return `pause ${q.name} via ${inst.name}`;
}

let purges = 0;
async function purge(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const q = pick(r, QUEUES);
  const tag = ++purges;
  const waiting = r.model.of(q).filter((i) => i.place === "ready" || i.place === "delayed");
  for (const it of waiting) {
    Object.assign(it, { leasable: it.place === "ready", place: "moving", dests: ["gone"], purge: tag });
    for (const f of ["due", "dueMax", "mustMove"] as const) delete it[f];
  }
  const n = await inst.sy.client.purgeQueue(q);
  await settle(r);
  const gone = r.model.items.filter((i) => i.purge === tag && i.place === "gone").length;
  if (gone !== n) r.hard.push(`purge of ${q} answered ${n}, but ${gone} items went`);
  return `purge ${q} via ${inst.name}: ${n} items (${describeItems(r, waiting)})`;
}

async function redeclare(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const q = r.model.queues.get(pick(r, QUEUES))!;
  const sessions = openSessions(r).filter((s) => s.queue === q.name);
  await quiet(r, sessions);
  for (const s of sessions) s.open = false;
  for (const it of r.model.of(q.name)) {
    if (it.place === "held") r.model.stale.push({ token: it.token!, queue: q.name, why: "queue deleted" });
    if (it.place === "held" || it.place === "inhand") for (const f of ["token", "field", "session", "claimAt", "killedAt"] as const) delete it[f];
    it.place = "gone";
  }
  const before = new Map(r.world.live().map((i) => [i, i.sy.app.queues.registry.cached(q.name)]));
  await inst.sy.client.deleteQueue(q.name, { purge: true });
  await inst.sy.client.createQueue(declarations[q.name]);
  q.paused = false;
  // Every instance has heard of the new declaration (a stream opened on the old one is failed when the delete arrives).
  await expect.poll(() => [...before].every(([i, old]) => ![undefined, old].includes(i.sy.app.queues.registry.cached(q.name)))).toBe(true);
  return `delete ${q.name} with purge and declare it again via ${inst.name} (sessions ${sessions.map((s) => s.id).join(", ") || "none"} end)`;
}

const steps: [number, (r: Run) => Promise<string | undefined>][] = [
  [3, enqueue], [3, (r) => rawPush(r)], [3, open], [1, credit], [9, settleOne], [2, stale], [1, endSession],
  [0.4, kill], [0.4, stop], [1, restart], [1, cut], [0.7, outage], [1, lostLease], [3, (r) => advance(r)], [1, pauseOrResume], [0.4, purge], [0.2, redeclare],
];
const totalWeight = steps.reduce((a, [w]) => a + w, 0);

async function randomStep(r: Run): Promise<string> {
  for (;;) {
    let x = r.next() * totalWeight;
    const [, fn] = steps.find(([w]) => (x -= w) < 0) ?? steps[steps.length - 1];
    const done = await fn(r);
    if (done) return done;
  }
}

/** Ends a history quietly: an instance up, queues resumed, streams closed, the clock past every timeout; nothing may stay in processing. */
async function windDown(r: Run): Promise<void> {
  if (r.world.live().length === 0) step(r, (await restart(r))!);
  for (const q of r.model.queues.values()) {
    if (!q.paused) continue;
    q.paused = false;
    await r.world.live()[0].sy.client.resumeQueue(q.name);
    step(r, `resume ${q.name}`);
  }
  const open = openSessions(r);
  await quiet(r, open);
  giveBack(r, open, "stream closed");
  await Promise.all(open.map((s) => s.lease.close()));
  step(r, `close sessions ${open.map((s) => s.id).join(", ") || "(none)"}`);
  await settle(r);
  for (let t = 0; t < INSTANCE_TIMEOUT_MS + MIN_IDLE_MS + 8000 + 4 * WATCHDOG_MS; t += 2000) {
    step(r, await advance(r, 2000));
    await settle(r);
  }
  const left = r.model.items.filter((i) => !["ready", "delayed", "dead", "gone"].includes(i.place));
  if (left.length > 0) throw new ModelFailure(`once quiet, items are still ${left.map((i) => `${r.model.describe(i)} ${i.place}`).join(", ")}`);
  const snaps = await r.world.snapshot(QUEUES);
  for (const [name, snap] of snaps) {
    if (snap.processing.length + snap.records.size + snap.claims.size + snap.live > 0) {
      throw new ModelFailure(`once quiet, "${name}" still has ${snap.processing.length} in processing, ${snap.records.size} records, ${snap.claims.size} claims, live ${snap.live}`);
    }
  }
}

/** What a history exercised, to see that its steps did something. */
function summary(r: Run): string {
  const counts = new Map<string, number>();
  const add = (k: string, n = 1) => counts.set(k, (counts.get(k) ?? 0) + n);
  add("deliveries", r.delivered);
  for (const t of r.model.stale) add(t.why);
  for (const it of r.model.items) add(`items ${it.place}`);
  add("redelivered", r.redelivered);
  return [...counts].map(([k, n]) => `${k} ${n}`).join(", ");
}

let redis: StandaloneRedis;
beforeAll(async () => {
  redis = await startStandaloneRedis();
});
afterAll(async () => {
  await Promise.all(killed);
  await redis?.stop();
});

async function runHistory(seed: number): Promise<void> {
  await redis.flushAll();
  const clock = new ManualClock();
  const world = new World(redis, clock);
  const r: Run = {
    seed, next: random(seed), world, model: new Model(queueModels()), history: [], t0: clock.now(),
    pending: [], refusals: new Map(), extends: new Map(), seen: new Map(), hard: [], delivered: 0, redelivered: 0,
  };
  try {
    const first = await world.start(0);
    for (const q of QUEUES) await first.sy.client.createQueue(declarations[q]);
    await world.start(1);
    step(r, `start ${world.instances.map((i) => i!.name).join(", ")}; declare ${QUEUES.join(", ")}`);
    for (let n = 0; n < STEPS; n++) {
      const text = await randomStep(r);
      step(r, text);
      await settle(r);
    }
    await windDown(r);
    if (process.env.SWITCHYARD_MODEL_PRINT) console.log(`queue model, seed ${seed}: ${summary(r)}\n${r.history.join("\n")}`);
  } catch (err) {
    const why = err instanceof ModelFailure ? err.message : String((err as Error).stack ?? err);
    throw new Error(
      `queue model, seed ${seed}: after step ${r.history.length}:\n${why}\n\nhistory (rerun: SWITCHYARD_MODEL_SEED=${seed} npx vitest run test/queue/model):\n${r.history.join("\n")}`,
    );
  } finally {
    await world.close();
  }
}

describe("queues against the model (SPEC Q14)", () => {
  for (let seed = FIRST_SEED; seed < FIRST_SEED + RUNS; seed++) {
    it(`history ${seed}: ${STEPS} steps`, () => runHistory(seed), 30_000 + STEPS * 2000);
  }
});
