/** Queue model steps on items and streams: enqueues, raw pushes, streams and their credit, settles, stale tokens, stream ends. */
import * as grpc from "@grpc/grpc-js";
import { below } from "../../helpers/random.js";
import type { Item } from "./model.js";
import type { Session } from "./world.js";
import {
  JITTER, MIN_IDLE_MS, QUEUES, awaitResult, chance, describeItems, errorCode, liveInstance, ms, now, openSessions, pick, rel, settle, type Run,
} from "./run.js";
let uid = 0;
/** A payload for a new item: text, non-UTF-8 bytes, or bytes that look like a derived claim member. */
export function payload(r: Run, raw: boolean): { value: Buffer; label: string } {
  const n = ++uid;
  const kind = below(r.next, 4);
  if (kind === 0) return { value: Buffer.concat([Buffer.from([0xff, 0xfe, 0x00]), Buffer.from(String(n))]), label: `b${n}` };
  if (kind === 1 && raw) return { value: Buffer.from(`\0SYC${n}@x`), label: `z${n}` };
  return { value: Buffer.from(`${raw ? "r" : "e"}${n}`), label: `${raw ? "r" : "e"}${n}` };
}


/**
 * Enqueues 1–3 items, some delayed, through any live instance; `served`: none
 * delayed, through an instance with an open stream on the queue, one of a
 * reliable queue, not paused, with credit to spare where there is one (its pump waits, so
 * the push carries the pump's lease: push-lease.lua).
 */
export async function enqueue(r: Run, served = false): Promise<string | undefined> {
  const live = served ? openSessions(r).filter((s) => s.inst.state === "live") : [];
  // Those of a reliable queue with credit to spare first: their pump waits, so the push carries its lease.
  const waiting = live.filter((s) => {
    const q = r.model.queues.get(s.queue)!;
    return q.reliable && !q.paused && s.credit - r.model.heldBy(s.id).length - s.phantoms.size > 0;
  });
  // Half the time with none waiting, another step is drawn instead.
  const serving = !served || waiting.length > 0 || chance(r, 0.5) ? waiting : live;
  if (served && serving.length === 0) return undefined;
  const session = served ? pick(r, serving) : undefined;
  const inst = session?.inst ?? liveInstance(r);
  if (!inst) return undefined;
  const q = session?.queue ?? pick(r, QUEUES);
  const n = 1 + below(r.next, 3);
  const items: Item[] = [];
  // Delayed items of one enqueue fall due 400 ms apart: a mover that moves an item early shows.
  let delayed = 0;
  const inputs = Array.from({ length: n }, () => {
    const p = payload(r, false);
    const delayMs = !served && chance(r, 0.3) ? pick(r, [500, 3000, 7000]) + 400 * delayed++ : 0;
    items.push(r.model.add(q, p.value, p.label, delayMs ? now(r) + delayMs : undefined));
    return delayMs ? { payload: p.value, delayMs } : p.value;
  });
  const ids = await inst.sy.client.enqueue(q, inputs);
  if (ids.length !== n) r.hard.push(`enqueue of ${n} items answered ${ids.length} ids`);
  return `enqueue ${q} via ${inst.name}: ${items.map((i) => r.model.describe(i) + (i.due ? ` delayed until ${rel(r, i.due)}` : "")).join(" ")}`;
}

/** LPUSH by a plain client: new values, or twins of a value already there. */
export async function rawPush(r: Run, q = pick(r, QUEUES)): Promise<string> {
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

export async function open(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst || openSessions(r).length >= 6) return undefined;
  const q = pick(r, QUEUES);
  const s = await r.world.open(inst, q, 1 + below(r.next, 4));
  return `open session ${s.id} on ${q} at ${inst.name}, credit ${s.credit}`;
}

export async function credit(r: Run): Promise<string | undefined> {
  const s = openSessions(r);
  if (s.length === 0) return undefined;
  const session = pick(r, s);
  session.credit = below(r.next, 5);
  session.maxCredit = Math.max(session.maxCredit, session.credit);
  session.lease.setCredit(session.credit);
  return `session ${session.id} credit ${session.credit}`;
}

type Action = "ack" | "retry" | "drop" | "extend";

export async function settleOne(r: Run): Promise<string | undefined> {
  const open = new Set(openSessions(r).map((s) => s.id));
  const held = r.model.items.filter((i) => (i.place === "held" || i.place === "inhand") && open.has(i.session!));
  if (held.length === 0) return undefined;
  const it = pick(r, held);
  const s = r.world.sessions[it.session!];
  const q = r.model.queues.get(it.queue)!;
  // An extend shows in its claim only once the clock moved since the claim: those get more of them.
  const aged = q.recovery && it.place === "held" && it.claimAt !== undefined && it.claimAt < now(r);
  const action = pick(r, ["ack", "ack", "retry", "retry", "drop", "extend", ...(aged ? ["extend", "extend"] : [])] as Action[]);
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
    else if (q.reliable) awaitResult(r.sent, s.id, token);
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

export async function stale(r: Run): Promise<string | undefined> {
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
export async function quiet(r: Run, sessions: Session[]): Promise<void> {
  for (const s of sessions) {
    s.credit = 0;
    s.lease.setCredit(0);
  }
  if (sessions.length > 0) await settle(r);
}

/** Their held items go back (counted): the streams ended. */
export function giveBack(r: Run, sessions: Session[], why: string): void {
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

/**
 * A stream gives back some of the deliveries it holds, as a worker does with
 * those it never started (LeaseRequest.release): to the front of their queue,
 * uncounted (a simple queue's popped items pushed back). Only deliveries that
 * nothing else may take meanwhile (no recovery, reap or return due).
 */
export async function release(r: Run): Promise<string | undefined> {
  const live = new Set(r.world.live());
  const calm = (it: Item) => it.mayLeave === undefined && it.mustLeave === undefined && it.killedAt === undefined;
  const sessions = openSessions(r).filter((s) => live.has(s.inst) && r.model.heldBy(s.id).some(calm));
  if (sessions.length === 0) return undefined;
  const s = pick(r, sessions);
  const mine = r.model.heldBy(s.id).filter(calm);
  const some = mine.filter(() => chance(r, 0.6));
  if (some.length === 0) some.push(pick(r, mine));
  const what = `stream ${s.id} releases ${describeItems(r, some)}`;
  const tokens = some.map((it) => it.token!);
  for (const it of some) {
    if (it.place === "held") r.model.stale.push({ token: it.token!, queue: it.queue, why: "released" });
    r.model.releaseBack(it);
  }
  s.lease.release(tokens);
  return what;
}

export async function endSession(r: Run): Promise<string | undefined> {
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
