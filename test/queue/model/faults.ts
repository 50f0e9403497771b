/** Queue model steps on instances, links and time: kills, stops, restarts, cuts, outages, lost answers, clock advances, pause, purge, redeclaration. */
import { expect } from "vitest";
import type { Item, Place } from "./model.js";
import { INSTANCE_TIMEOUT_MS, WATCHDOG_MS, type Instance } from "./world.js";
import {
  MIN_IDLE_MS, QUEUES, SLOTS, awaitResult, chance, declarations, describeItems, liveInstance, now, openSessions, pick, rel, settle, type Run,
} from "./run.js";
import { giveBack, quiet, rawPush } from "./items.js";
export async function kill(r: Run): Promise<string | undefined> {
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
  answersMayBeLost(r, [inst]);
  r.world.kill(inst);
  r.model.killed.set(inst.sy.app.queues.instances.id, now(r));
  return `kill ${inst.name} (sessions ${sessions.map((s) => s.id).join(", ") || "none"})`;
}

export async function stop(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const sessions = openSessions(r).filter((s) => s.inst === inst);
  await quiet(r, sessions);
  giveBack(r, sessions, "instance stopped");
  await r.world.stop(inst);
  return `stop ${inst.name} gracefully (sessions ${sessions.map((s) => s.id).join(", ") || "none"})`;
}

export async function restart(r: Run): Promise<string | undefined> {
  const free = [...Array(SLOTS).keys()].filter((slot) => r.world.instances[slot]?.state !== "live");
  if (free.length === 0) return undefined;
  const inst = await r.world.start(pick(r, free));
  return `start ${inst.name}`;
}

export async function cut(r: Run): Promise<string | undefined> {
  const live = r.world.live();
  if (live.length === 0) return undefined;
  const targets = chance(r, 0.5) ? live : [pick(r, live)];
  const pushed = chance(r, 0.7) ? await rawPush(r, pick(r, openSessions(r).map((s) => s.queue).concat(QUEUES))) : "";
  // Each instance's command connection reconnects: wait for that, so later steps' calls find Redis.
  const back = targets.map((inst) => new Promise((ok) => inst.sy.app.redis.client.once("ready", ok)));
  const lost = popsMayBeLost(r, targets);
  answersMayBeLost(r, targets);
  for (const inst of targets) inst.link.cut();
  await Promise.all(back);
  return `${pushed ? `${pushed}, then at once ` : ""}cut the Redis connections of ${targets.map((i) => i.name).join(", ")}${lost}`;
}

/**
 * A stream settle the model saw apply may still wait for its answer when its instance's
 * connections reset: it comes back UNAVAILABLE, the call "may or may not have taken effect".
 */
export function answersMayBeLost(r: Run, targets: Instance[]): void {
  for (const s of r.world.sessions.filter((s) => targets.includes(s.inst))) {
    for (const token of r.sent.get(s.id) ?? []) r.answerLost.add(token);
    r.sent.delete(s.id);
  }
}

/**
 * A simple queue's pop whose answer a cut loses has taken its items for good (at most
 * once, SPEC Q3): the ready items of simple queues that streams on `targets` take may go.
 */
export function popsMayBeLost(r: Run, targets: Instance[]): string {
  const queues = new Set(openSessions(r).filter((s) => targets.includes(s.inst) && !r.model.queues.get(s.queue)!.reliable).map((s) => s.queue));
  const items = r.model.items.filter((i) => queues.has(i.queue) && i.place === "ready");
  for (const it of items) Object.assign(it, { place: "moving", dests: ["ready", "gone"], leasable: true });
  return items.length > 0 ? ` (a pop cut there loses its items: ${describeItems(r, items)} may go)` : "";
}

/** Items pushed for a stream with credit; the answer to the lease that takes them is lost (its connection reset after the script went out). */
export async function lostLease(r: Run): Promise<string | undefined> {
  const streams = openSessions(r).filter((s) => {
    const q = r.model.queues.get(s.queue)!;
    return q.reliable && !q.paused && s.credit > r.model.heldBy(s.id).length;
  });
  if (streams.length === 0) return undefined;
  const s = pick(r, streams);
  const inst = s.inst;
  const sha = (inst.sy.app.redis.client as unknown as { scriptsSet: Record<string, { sha: string }> }).scriptsSet.syLease.sha;
  let lost = false;
  answersMayBeLost(r, [inst]);
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
export async function outage(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const sessions = openSessions(r).filter((s) => s.inst === inst && (r.model.heldBy(s.id).length > 0 || chance(r, 0.5)));
  await quiet(r, sessions);
  const held = sessions.map((s) => `${s.id} holding ${describeItems(r, r.model.heldBy(s.id)) || "nothing"}`);
  giveBack(r, sessions, "stream closed in an outage");
  const lost = popsMayBeLost(r, [inst]);
  answersMayBeLost(r, [inst]);
  inst.link.down();
  // The server ends a closed stream once its first return attempt failed.
  await Promise.all(sessions.map((s) => s.lease.close()));
  const back = new Promise((ok) => inst.sy.app.redis.client.once("ready", ok));
  inst.link.up();
  await back;
  return `Redis down for ${inst.name}; close session ${held.join(", ") || "(none)"}; Redis up${lost}`;
}

/** The earliest time by which a watchdog pass (or a mover scan) of a live instance has surely run at or after `t`. */
export function servedBy(r: Run, t: number): number {
  return Math.min(...r.world.live().map((i) => Math.max(t, i.startedAt) + 2 * WATCHDOG_MS));
}

/** How far to advance: a plain step, or to just before (or right at) the next due item or claim deadline, where an off-by-one shows. */
export function advanceBy(r: Run): number {
  const deadlines = r.model.items.flatMap((i) =>
    i.place === "delayed" && i.due !== undefined ? [i.due] : i.place === "held" && i.claimAt !== undefined ? [i.claimAt + MIN_IDLE_MS] : [],
  ).filter((t) => t > now(r));
  if (deadlines.length === 0 || chance(r, 0.6)) return pick(r, [300, 1000, 2500, 4000, 6000]);
  return Math.max(1, pick(r, deadlines) - now(r) - pick(r, [1, 0]));
}

export async function advance(r: Run, by?: number): Promise<string> {
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

/**
 * How long a declaration change may take to reach every live instance: an instance whose pub/sub
 * connection is still coming back from an outage (its reconnects back off up to 1 s: redis/connection.ts)
 * misses the event and reads the declarations afresh once it listens again.
 */
const PROPAGATION_MS = 5000;

export async function pauseOrResume(r: Run): Promise<string | undefined> {
  const inst = liveInstance(r);
  if (!inst) return undefined;
  const q = r.model.queues.get(pick(r, QUEUES))!;
  if (q.paused) {
    q.paused = false;
    await inst.sy.client.resumeQueue(q.name);
    return `resume ${q.name} via ${inst.name}`;
  }
  await inst.sy.client.pauseQueue(q.name);
  await expect.poll(() => r.world.live().every((i) => i.sy.app.queues.registry.cached(q.name)?.paused), { timeout: PROPAGATION_MS }).toBe(true);
  await settle(r); // deliveries leased before the pause reached every instance may still arrive
  q.paused = true;
  return `pause ${q.name} via ${inst.name}`;
}

let purges = 0;
export async function purge(r: Run): Promise<string | undefined> {
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

export async function redeclare(r: Run): Promise<string | undefined> {
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
  await expect.poll(() => [...before].every(([i, old]) => ![undefined, old].includes(i.sy.app.queues.registry.cached(q.name))), { timeout: PROPAGATION_MS }).toBe(true);
  return `delete ${q.name} with purge and declare it again via ${inst.name} (sessions ${sessions.map((s) => s.id).join(", ") || "none"} end)`;
}

/**
 * A long handler (issue 14): a held item of a queue with a recovery set is extended
 * after 6 s, and 6 s later it is still held: the extend restarted its claim.
 */
export async function longHandler(r: Run): Promise<string | undefined> {
  const open = new Set(openSessions(r).map((s) => s.id));
  const fresh = (i: Item) => i.claimAt !== undefined && i.claimAt + MIN_IDLE_MS > now(r) + 6000;
  const held = r.model.items.filter((i) => i.place === "held" && open.has(i.session!) && r.model.queues.get(i.queue)!.recovery && fresh(i));
  if (held.length === 0) return undefined;
  const { uid, token, session } = pick(r, held);
  const s = r.world.sessions[session!];
  const what = `${r.model.describe(r.model.items.find((i) => i.uid === uid)!)} on session ${s.id}`;
  await advance(r, 6000);
  await settle(r);
  // (The model's items are new objects after each look.)
  const it = r.model.items.find((i) => i.uid === uid)!;
  if (it.place !== "held" || it.token !== token) return `advance 6000 ms; ${what} went meanwhile`;
  it.expectClaim = now(r);
  awaitResult(r.extends, s.id, it.token!);
  s.lease.extend(it.token!);
  await settle(r);
  await advance(r, 6000);
  return `long handler: advance 6000 ms, extend ${what} on its stream, advance 6000 ms`;
}
