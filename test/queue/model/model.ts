/**
 * The reference model of SPEC Q14 for the queue model tests, in plain TS:
 * every item enqueued is in exactly one place (ready, delayed, held by one
 * live delivery, dead letters, or gone once acked, dropped or purged), with
 * the deliveries its history counts. Steps tell the model what they did; what
 * the system does on its own (leasing to streams with credit, the delayed
 * mover, the watchdog, returns, reaping a dead instance) the model allows
 * within bounds and learns from what it observes. `check` compares the model
 * with a snapshot of Redis and the deliveries that arrived.
 */
import type { QueueSnapshot, Stored } from "./world.js";

export type Place = "ready" | "delayed" | "held" | "inhand" | "dead" | "gone" | "moving";

export interface QueueModel {
  name: string;
  reliable: boolean;
  /** A recovery set: claims, recovered after min_idle. */
  recovery: boolean;
  minIdleMs: number;
  maxDeliveries: number;
  /** The retry policy's wait before attempt count + 1 (jitter 0). */
  backoff(count: number): number;
  paused: boolean;
}

export interface Item {
  uid: number;
  queue: string;
  /** The payload, hex. */
  key: string;
  count: number;
  place: Place;
  /** delayed: when due (the earliest, when `dueMax` is set: a policy's wait with jitter). */
  due?: number;
  dueMax?: number;
  /** delayed: the mover must have made it ready by now. */
  mustMove?: boolean;
  /** held / inhand: the delivery. */
  token?: string;
  field?: string;
  session?: number;
  /** held on a queue with a recovery set: the claim's time. */
  claimAt?: number;
  /** held by a delivery of an instance killed at this time. */
  killedAt?: number;
  /** held: may have gone back meanwhile (counted), to one of these places. */
  mayLeave?: Place[];
  /** held: must have gone back by now. */
  mustLeave?: string;
  /** moving: may be in one of these places now ("gone": purged). */
  dests?: Place[];
  /** moving, or gone by a purge or a lost pop: may have been leased from the ready list meanwhile. */
  leasable?: boolean;
  /** Set by a purge: counts the items it removed. */
  purge?: number;
  /** held, after an extend: the claim's time must be this. */
  expectClaim?: number;
}

/** A delivery that arrived on a session. */
export interface Arrival {
  session: number;
  queue: string;
  token: string;
  field: string;
  key: string;
  count: number;
  /** When the session's instance was killed, if it was (its items stay held until reaped). */
  killedAt?: number;
}

export class Model {
  items: Item[] = [];
  /** Tokens no longer live: settled, returned, recovered, reaped, or of a deleted queue. */
  readonly stale: { token: string; queue: string; why: string }[] = [];
  readonly labels = new Map<string, string>();
  /** Deliveries that left a session's hands without a settle it made (recovered): its credit frees at its next check. */
  readonly released: { session: number; token: string }[] = [];
  /** Killed instances' ids → when they were killed. */
  readonly killed = new Map<string, number>();
  private uid = 0;

  constructor(readonly queues: Map<string, QueueModel>) {}

  label(key: string): string {
    return this.labels.get(key) ?? `?${key.slice(0, 16)}`;
  }

  describe(it: Item): string {
    return `${this.label(it.key)}#${it.uid}(count ${it.count})`;
  }

  add(queue: string, payload: Buffer, label: string, due?: number): Item {
    const key = payload.toString("hex");
    if (!this.labels.has(key)) this.labels.set(key, label);
    const it: Item = { uid: ++this.uid, queue, key, count: 0, place: due ? "delayed" : "ready", due };
    this.items.push(it);
    return it;
  }

  of(queue: string, place?: Place): Item[] {
    return this.items.filter((i) => i.queue === queue && (!place || i.place === place));
  }

  heldBy(session: number): Item[] {
    return this.items.filter((i) => (i.place === "held" || i.place === "inhand") && i.session === session);
  }

  /** Where an item goes back to with `count` deliveries after a retry, return or recovery that waits `wait`. */
  backPlaces(q: QueueModel, count: number, wait: number | "policy"): Place[] {
    if (q.maxDeliveries > 0 && count >= q.maxDeliveries) return ["dead"];
    const ms = wait === "policy" ? q.backoff(count) : wait;
    return ms > 0 ? ["delayed", "ready"] : ["ready"];
  }

  /** A held item goes back now, counted, to `dests` (a stream's end, a graceful stop). */
  moveBack(it: Item, dests: Place[]): void {
    Object.assign(it, { place: "moving", count: it.count + 1, dests, leasable: dests.includes("ready") });
    clear(it, "token", "field", "session", "claimAt", "killedAt", "mayLeave", "mustLeave");
  }

  /** A held item given back uncounted (LeaseRequest.release): to the front of its queue, its count as it was. */
  releaseBack(it: Item): void {
    Object.assign(it, { place: "moving", dests: ["ready"], leasable: true });
    clear(it, "token", "field", "session", "claimAt", "killedAt", "mayLeave", "mustLeave");
  }

  /**
   * Checks the model against a snapshot and the arrivals since the last check.
   * Returns the problems; with none, the model takes in what it learnt.
   */
  check(snaps: Map<string, QueueSnapshot>, arrivals: readonly Arrival[], now: number, credits: Map<number, number>): string[] {
    const items = this.items.map((i) => ({ ...i }));
    const problems: string[] = [];
    const staled: { token: string; queue: string; why: string }[] = [];
    const released: { session: number; token: string }[] = [];
    const d = (it: Item) => this.describe(it);

    // Held deliveries whose record went away: returned or recovered (only where allowed).
    for (const it of items) {
      if (it.place !== "held") continue;
      const snap = snaps.get(it.queue)!;
      if (snap.records.has(it.field!)) {
        if (it.mustLeave) problems.push(`${d(it)}: delivery ${it.field} should have gone back by now (${it.mustLeave})`);
        continue;
      }
      if (!it.mayLeave) {
        problems.push(`${d(it)}: delivery ${it.field} lost its record with no settle, stream end, recovery or reap`);
        continue;
      }
      if (it.token) staled.push({ token: it.token, queue: it.queue, why: it.killedAt !== undefined ? "reaped" : "recovered" });
      if (it.session !== undefined && it.token) released.push({ session: it.session, token: it.token });
      this.moveBack(it, it.mayLeave);
    }

    // Deliveries: each takes an item that could be leased, with the right count.
    for (const a of arrivals) {
      const q = this.queues.get(a.queue)!;
      if (q.paused) problems.push(`delivery ${a.field} of ${this.label(a.key)} on "${a.queue}" while it is paused`);
      const rank = (i: Item) =>
        i.place === "ready" ? 0 : i.place === "delayed" && (i.due ?? 0) <= now ? 1 : i.place === "moving" && i.leasable ? 2 : i.place === "gone" && i.leasable ? 3 : -1;
      const candidates = items
        .filter((i) => i.queue === a.queue && i.key === a.key && rank(i) >= 0 && (q.reliable ? i.count === a.count - 1 : a.count === 1))
        .sort((x, y) => rank(x) - rank(y));
      const it = candidates[0];
      if (!it) {
        const known = items.filter((i) => i.queue === a.queue && i.key === a.key).map((i) => `${d(i)} ${i.place}`);
        problems.push(`delivery ${a.token} of ${this.label(a.key)} with delivery count ${a.count}: no such item could be leased (${known.join(", ") || "none"})`);
        continue;
      }
      Object.assign(it, { place: q.reliable ? "held" : "inhand", token: a.token, field: a.field, session: a.session, killedAt: a.killedAt });
      clear(it, "due", "dueMax", "mustMove", "dests", "leasable", "mayLeave", "mustLeave", "purge");
    }
    for (const [session, credit] of credits) {
      const n = items.filter((i) => (i.place === "held" || i.place === "inhand") && i.session === session).length;
      if (n > credit) problems.push(`session ${session} holds ${n} deliveries, more than its credit ever was (${credit})`);
    }

    for (const [name, q] of this.queues) {
      const snap = snaps.get(name)!;
      const mine = items.filter((i) => i.queue === name);
      if (q.reliable) this.checkDeliveries(q, snap, mine, problems);
      this.matchPlaces(name, snap, mine, problems, now);
    }
    if (problems.length === 0) {
      this.items = items;
      this.stale.push(...staled);
      this.released.push(...released);
    }
    return problems;
  }

  /** Records, processing list, claims and the live counter against the held items. */
  private checkDeliveries(q: QueueModel, snap: QueueSnapshot, mine: Item[], problems: string[]): void {
    const held = mine.filter((i) => i.place === "held");
    const fields = new Map(held.map((i) => [i.field!, i]));
    for (const [field, r] of snap.records) {
      let it = fields.get(field);
      const killedAt = this.killed.get(field.slice(field.indexOf("@") + 1));
      if (!it && killedAt !== undefined) {
        // A lease of an instance killed as its answer was on the way: held by nobody until reaped.
        it = mine.find((i) => (i.place === "ready" || (i.place === "moving" && i.leasable)) && i.key === r.key && i.count === r.count);
        if (it) {
          Object.assign(it, { place: "held", field, killedAt });
          clear(it, "dests", "leasable", "purge");
          held.push(it);
          continue;
        }
      }
      if (!it) problems.push(`"${q.name}": record ${field} (${this.label(r.key)}, count ${r.count}) is no delivery a worker holds`);
      else if (it.key !== r.key || it.count !== r.count) problems.push(`${this.describe(it)}: its record ${field} holds ${this.label(r.key)} count ${r.count}`);
    }
    const diff = multisetDiff(snap.processing, held);
    if (diff) problems.push(`"${q.name}" processing list ≠ held deliveries: ${this.diffText(diff)}`);
    if (snap.live !== snap.records.size) problems.push(`"${q.name}": live counter ${snap.live}, ${snap.records.size} records`);
    if (!q.recovery) return;
    if (snap.claims.size !== snap.records.size) problems.push(`"${q.name}": ${snap.claims.size} claims for ${snap.records.size} records`);
    for (const it of held) {
      const r = snap.records.get(it.field!);
      const at = r && snap.claims.get(r.member);
      if (r && at === undefined) problems.push(`${this.describe(it)}: delivery ${it.field} has no claim`);
      else if (at !== undefined) {
        if (it.expectClaim !== undefined && at !== it.expectClaim) problems.push(`${this.describe(it)}: extended at ${it.expectClaim}, but its claim says ${at}`);
        it.claimAt = at;
        delete it.expectClaim;
      }
    }
  }

  /** Ready, delayed and dead lists against the items that belong there, placing moving items where they are. */
  private matchPlaces(name: string, snap: QueueSnapshot, mine: Item[], problems: string[], now: number): void {
    const left = {
      ready: snap.ready.map((s) => ({ ...s, due: 0 })),
      delayed: [...snap.delayed],
      dead: snap.dead.map((s) => ({ ...s, due: 0 })),
    };
    type Slot = keyof typeof left;
    const allowed = (it: Item): { places: Slot[]; due?: number; dueMax?: number } | undefined => {
      switch (it.place) {
        case "ready":
        case "dead":
          return { places: [it.place] };
        case "delayed":
          return { places: it.mustMove ? ["ready"] : (it.due ?? 0) <= now ? ["delayed", "ready"] : ["delayed"], due: it.due, dueMax: it.dueMax ?? it.due };
        case "moving":
          return { places: it.dests!.filter((p): p is Slot => p in left) };
        default:
          return undefined;
      }
    };
    // The most constrained first (fewest places, then the narrowest due time), so a flexible
    // item never takes an entry a fixed one needs.
    const width = (a: { due?: number; dueMax?: number }) => (a.due === undefined ? Infinity : a.dueMax! - a.due);
    const order = mine
      .map((it) => ({ it, a: allowed(it) }))
      .filter((x) => x.a)
      .sort((x, y) => x.a!.places.length - y.a!.places.length || Number(x.it.place === "moving") - Number(y.it.place === "moving") || width(x.a!) - width(y.a!));
    for (const { it, a } of order) {
      let found = false;
      for (const place of a!.places) {
        const list = left[place];
        const j = list.findIndex((s) => s.key === it.key && s.count === it.count && (place !== "delayed" || a!.due === undefined || (s.due >= a!.due && s.due <= a!.dueMax!)));
        if (j < 0) continue;
        const [entry] = list.splice(j, 1);
        if (it.place === "moving" || place !== it.place) {
          Object.assign(it, { place, due: place === "delayed" ? entry.due : undefined });
          clear(it, "dests", "leasable", "mustMove", "purge", "dueMax");
        } else if (place === "delayed") {
          it.due = entry.due;
          clear(it, "dueMax");
        }
        found = true;
        break;
      }
      if (found) continue;
      if (it.place === "moving" && it.dests!.includes("gone")) {
        // Purged, or taken by a pop whose answer was lost; one on its way to a stream may still arrive (leasable).
        it.place = "gone";
        clear(it, "dests");
        continue;
      }
      const where = a!.places.map((p) => (p === "delayed" && a!.due ? `delayed until ${a!.due}${a!.dueMax !== a!.due ? `..${a!.dueMax}` : ""}` : p)).join(" or ");
      problems.push(`${this.describe(it)} is missing: expected ${it.place === "moving" ? "back " : ""}in ${where || "nowhere"}`);
    }
    for (const [place, list] of Object.entries(left)) {
      for (const s of list) problems.push(`"${name}" ${place} holds ${this.label(s.key)} (count ${s.count}${place === "delayed" ? `, due ${s.due}` : ""}) that the model has nowhere there`);
    }
  }

  private diffText(diff: { extra: Stored[]; missing: Stored[] }): string {
    const f = (s: Stored) => `${this.label(s.key)}/${s.count}`;
    return `extra [${diff.extra.map(f).join(", ")}], missing [${diff.missing.map(f).join(", ")}]`;
  }
}

function clear(it: Item, ...fields: (keyof Item)[]): void {
  for (const f of fields) delete it[f];
}

/** What `actual` has beyond `expected` and lacks of it, as multisets of payload and count; undefined when equal. */
function multisetDiff(actual: readonly Stored[], expected: readonly Stored[]): { extra: Stored[]; missing: Stored[] } | undefined {
  const tag = (s: Stored) => `${s.key}/${s.count}`;
  const counts = new Map<string, number>();
  for (const s of actual) counts.set(tag(s), (counts.get(tag(s)) ?? 0) + 1);
  const missing: Stored[] = [];
  for (const s of expected) {
    const n = counts.get(tag(s)) ?? 0;
    if (n === 0) missing.push({ key: s.key, count: s.count });
    else counts.set(tag(s), n - 1);
  }
  const extra = actual.filter((s) => {
    const n = counts.get(tag(s)) ?? 0;
    if (n === 0) return false;
    counts.set(tag(s), n - 1);
    return true;
  });
  return extra.length || missing.length ? { extra, missing } : undefined;
}
