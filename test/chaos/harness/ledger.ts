/**
 * The ledger and the checker (SPEC Q14: what "nothing lost" means).
 *
 * The ledger records every acknowledged enqueue (the ids the Enqueue RPC
 * returned), every enqueue that failed (its items may or may not be in Redis),
 * every delivery (item, lease token, worker), every ack and retry, and the
 * faults the scenario injected. The checker reads the queues' lists in Redis at
 * the end and computes:
 *   lost       = acknowledged enqueues never acked and not in the queue, processing
 *                or dead-letter list at the end (an ack that failed with an
 *                unknown outcome, e.g. UNAVAILABLE as Redis died, counts as an
 *                ack: it may have been applied; see Ledger.ackedIds);
 *   duplicates = deliveries beyond the first per item;
 *   misplaced  = items found in more than one place (or twice in one).
 * Only the items enqueued onto the queues given to `check` are counted.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Cluster, Redis } from "ioredis";
import { expect } from "vitest";
import type { SwitchyardClient } from "../../../src/client/client.js";
import { decodeItem } from "../../../src/queue/envelope.js";
import { ARTIFACTS, RESULTS, type ScenarioResult } from "./results.js";

/** One line a worker printed (see test/chaos/worker.mjs). */
export interface WorkerEvent {
  e: string;
  w: string;
  t: number;
  s?: number;
  id?: string;
  tok?: string;
  f?: number;
  n?: number;
  ok?: boolean;
  code?: number;
  msg?: string;
  addr?: string;
  p?: string;
  graceMs?: number | null;
  q?: string;
  /** On a delivery: acked at once on its stream. */
  ak?: number;
}

export interface DeliveryRecord {
  t: number;
  id: string;
  /** The queue it came from, when known. */
  queue?: string;
  tok: string;
  fence?: number;
  count?: number;
  worker: string;
  stream?: number;
}

export interface SettleRecord {
  t: number;
  id: string;
  tok: string;
  worker: string;
  via: "stream" | "unary";
  action: "ack" | "retry";
  /** false once the server refused it; undefined: not refused (a stream settle is not echoed). */
  ok?: boolean;
  code?: number;
}

/** gRPC codes after which a call may or may not have taken effect. */
const INDETERMINATE = new Set([1, 2, 4, 13, 14]);
const indeterminate = (code?: number) => code === undefined || INDETERMINATE.has(code);

export class Ledger {
  /** id → when its Enqueue call returned it. */
  readonly enqueued = new Map<string, number>();
  /** id → the queue it was enqueued onto. */
  readonly queueOf = new Map<string, string>();
  /** Enqueue calls that failed: their items may or may not have reached Redis. */
  readonly unconfirmed: { t: number; items: number; code?: number; message: string }[] = [];
  readonly deliveries: DeliveryRecord[] = [];
  readonly settles: SettleRecord[] = [];
  readonly events: { t: number; what: string; [k: string]: unknown }[] = [];
  readonly workerEvents: WorkerEvent[] = [];
  private readonly byToken = new Map<string, SettleRecord>();

  note(what: string, extra: Record<string, unknown> = {}): void {
    this.events.push({ t: Date.now(), what, ...extra });
  }

  onWorkerEvent(e: WorkerEvent): void {
    // Deliveries and settles are kept in their own lists; the rest as is.
    switch (e.e) {
      case "d":
        this.deliveries.push({ t: e.t, id: e.id!, tok: e.tok!, fence: e.f, count: e.n, worker: e.w, stream: e.s, queue: e.q });
        if (e.ak) {
          const rec: SettleRecord = { t: e.t, id: e.id!, tok: e.tok!, worker: e.w, via: "stream", action: "ack" };
          this.settles.push(rec);
          this.byToken.set(rec.tok, rec);
        }
        return;
      case "a":
      case "r": {
        const rec: SettleRecord = { t: e.t, id: e.id!, tok: e.tok!, worker: e.w, via: "stream", action: e.e === "a" ? "ack" : "retry" };
        this.settles.push(rec);
        this.byToken.set(rec.tok, rec);
        return;
      }
      case "ua":
        this.settles.push({ t: e.t, id: e.id!, tok: e.tok!, worker: e.w, via: "unary", action: "ack", ok: e.ok, code: e.code });
        return;
      case "sr": {
        const rec = this.byToken.get(e.tok!);
        if (rec) {
          rec.ok = false;
          rec.code = e.code;
        }
        break;
      }
    }
    this.workerEvents.push(e);
  }

  /** Records a delivery the test itself received (an in-test lease session). */
  delivered(worker: string, d: { id: string; leaseToken: string; fence: bigint; deliveryCount: number; queue: string }): void {
    this.deliveries.push({ t: Date.now(), id: d.id, tok: d.leaseToken, fence: Number(d.fence), count: d.deliveryCount, worker, queue: d.queue });
  }

  /** Records an ack the test itself made. */
  acked(worker: string, id: string, tok: string, via: "stream" | "unary", ok?: boolean, code?: number): void {
    this.settles.push({ t: Date.now(), id, tok, worker, via, action: "ack", ok, code });
  }

  /**
   * Ids acked at least once and not refused. An ack that failed with a status
   * that leaves its outcome unknown (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED,
   * UNKNOWN, INTERNAL: Redis or the connection died while it was applied) may
   * have been applied, so it counts: an item it took away is not lost. Only a
   * definite refusal (FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT...)
   * means the ack changed nothing.
   */
  ackedIds(): Set<string> {
    const out = new Set<string>();
    for (const s of this.settles) if (s.action === "ack" && (s.ok !== false || indeterminate(s.code))) out.add(s.id);
    return out;
  }

  /** Acks whose outcome is unknown (see ackedIds). */
  indeterminateAcks(): number {
    return this.settles.filter((s) => s.action === "ack" && s.ok === false && indeterminate(s.code)).length;
  }

  deliveriesOf(id: string): DeliveryRecord[] {
    return this.deliveries.filter((d) => d.id === id);
  }

  /** Enqueues through `client` (or `call`, for request options the client lacks) and records the ids it returns (or the failure). */
  async enqueue(client: SwitchyardClient, queue: string, payloads: (string | Uint8Array)[], call?: () => Promise<string[]>): Promise<string[]> {
    try {
      const ids = await (call ? call() : client.enqueue(queue, payloads));
      const t = Date.now();
      for (const id of ids) {
        this.enqueued.set(id, t);
        this.queueOf.set(id, queue);
      }
      return ids;
    } catch (err) {
      const e = err as { code?: number; details?: string; message?: string };
      this.unconfirmed.push({ t: Date.now(), items: payloads.length, code: e.code, message: e.details ?? e.message ?? String(err) });
      throw err;
    }
  }

  toJSON() {
    return {
      enqueued: [...this.enqueued].map(([id, t]) => ({ id, t, queue: this.queueOf.get(id) })),
      unconfirmed: this.unconfirmed,
      deliveries: this.deliveries,
      settles: this.settles,
      events: this.events,
      workerEvents: this.workerEvents,
    };
  }
}

/** A continuous producer: one Enqueue of `batch` items every `everyMs`, until stopped. */
export function produce(
  ledger: Ledger,
  client: SwitchyardClient,
  queue: string,
  options: { batch?: number; everyMs?: number; payload?: (i: number) => string; call?: (payloads: string[]) => Promise<string[]> } = {},
): { stop(): Promise<void>; readonly ok: number; readonly failed: number; lastOkAt(): number; failures: { t: number; code?: number; ms: number }[] } {
  let stopped = false;
  let ok = 0;
  let failed = 0;
  let lastOk = 0;
  let n = 0;
  const failures: { t: number; code?: number; ms: number }[] = [];
  const loop = (async () => {
    while (!stopped) {
      const payloads = Array.from({ length: options.batch ?? 5 }, () => (options.payload ?? ((i) => `item-${i}`))(n++));
      const started = Date.now();
      try {
        await ledger.enqueue(client, queue, payloads, options.call && (() => options.call!(payloads)));
        ok++;
        lastOk = Date.now();
      } catch (err) {
        failed++;
        failures.push({ t: Date.now(), code: (err as { code?: number }).code, ms: Date.now() - started });
      }
      await new Promise((r) => setTimeout(r, options.everyMs ?? 20));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
    },
    get ok() {
      return ok;
    },
    get failed() {
      return failed;
    },
    lastOkAt: () => lastOk,
    failures,
  };
}

/** The lists of one queue, by item id. */
export interface QueueContents {
  name: string;
  queue: string[];
  processing: string[];
  dead: string[];
}

/** Reads a queue's lists (default key names) from Redis. */
export async function readQueue(redis: Redis | Cluster, name: string): Promise<QueueContents> {
  const ids = async (key: string) => (await redis.lrangeBuffer(key, 0, -1)).map((v) => decodeItem(v).id || `raw:${v.toString("base64")}`);
  const [queue, processing, dead] = await Promise.all([ids(name), ids(`${name}.processing`), ids(`${name}.dead`)]);
  return { name, queue, processing, dead };
}

/** What the checker found. */
export interface Figures {
  enqueued: number;
  /** Enqueue calls that failed (items not acknowledged). */
  unconfirmedCalls: number;
  acked: number;
  lost: number;
  lostIds: string[];
  duplicates: number;
  /** Items delivered more than once. */
  redelivered: number;
  inQueue: number;
  inProcessing: number;
  inDead: number;
  /** Items found in more than one place, or twice in one list. */
  misplaced: string[];
  /** Acknowledged items neither acked nor dead-lettered (still in the queue or processing). */
  unsettled: number;
  /** Delivered ids that no acknowledged enqueue returned (from enqueues that failed on the way back). */
  unknownDelivered: number;
  /** Acks that failed with an unknown outcome (counted as acks: they may have been applied). */
  indeterminateAcks: number;
}

/** Compares the ledger with what Redis holds at the end, for the items enqueued onto these queues. */
export function check(ledger: Ledger, contents: QueueContents[]): Figures {
  const queues = new Set(contents.map((c) => c.name));
  const mine = (id: string) => queues.has(ledger.queueOf.get(id) ?? "");
  const where = new Map<string, number>();
  let inQueue = 0;
  let inProcessing = 0;
  let inDead = 0;
  const misplaced = new Set<string>();
  for (const c of contents) {
    for (const [list, ids] of [["q", c.queue], ["p", c.processing], ["d", c.dead]] as const) {
      for (const id of ids) {
        where.set(id, (where.get(id) ?? 0) + 1);
        if (where.get(id)! > 1) misplaced.add(id);
        if (list === "q") inQueue++;
        else if (list === "p") inProcessing++;
        else inDead++;
      }
    }
  }
  const acked = ledger.ackedIds();
  const deadIds = new Set(contents.flatMap((c) => c.dead));
  const lostIds: string[] = [];
  let unsettled = 0;
  let enqueued = 0;
  for (const id of ledger.enqueued.keys()) {
    if (!mine(id)) continue;
    enqueued++;
    if (!acked.has(id) && !where.has(id)) lostIds.push(id);
    if (!acked.has(id) && !deadIds.has(id) && where.has(id)) unsettled++;
  }
  const perItem = new Map<string, number>();
  for (const d of ledger.deliveries) {
    // Deliveries of items enqueued elsewhere (or never acknowledged) are counted only by queue they came from.
    if (ledger.enqueued.has(d.id) ? !mine(d.id) : !d.queue || !queues.has(d.queue)) continue;
    perItem.set(d.id, (perItem.get(d.id) ?? 0) + 1);
  }
  let duplicates = 0;
  let redelivered = 0;
  let unknownDelivered = 0;
  for (const [id, n] of perItem) {
    duplicates += n - 1;
    if (n > 1) redelivered++;
    if (!ledger.enqueued.has(id)) unknownDelivered++;
  }
  return {
    enqueued,
    unconfirmedCalls: ledger.unconfirmed.length,
    acked: [...acked].filter((id) => ledger.enqueued.has(id) && mine(id)).length,
    lost: lostIds.length,
    lostIds: lostIds.slice(0, 50),
    duplicates,
    redelivered,
    inQueue,
    inProcessing,
    inDead,
    misplaced: [...misplaced].slice(0, 50),
    unsettled,
    unknownDelivered,
    indeterminateAcks: ledger.indeterminateAcks(),
  };
}

/** Waits (bounded) until every acknowledged item is acked or dead-lettered and the lists are empty of them. */
export async function waitSettled(ledger: Ledger, redis: Redis | Cluster, queues: string[], ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    // Cheap first: the lengths. The full read (and decode) only once they are 0.
    const lengths = await Promise.all(queues.flatMap((q) => [redis.llen(q), redis.llen(`${q}.processing`)]));
    if (lengths.every((n) => n === 0)) {
      const f = check(ledger, await Promise.all(queues.map((q) => readQueue(redis, q))));
      if (f.unsettled === 0 && f.inProcessing === 0 && f.inQueue === 0) return true;
    }
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A scenario's bookkeeping: its ledger, named checks (all evaluated, failures
 * collected) and figures. `finish` writes results/<id>.json for the final
 * table and, when a check failed, the whole history to <id>.json.
 */
export class Scenario {
  readonly ledger = new Ledger();
  readonly checks: { name: string; ok: boolean; detail?: string }[] = [];
  readonly figures: Record<string, unknown> = {};
  readonly notes: string[] = [];
  lost?: number;
  duplicates?: number;
  recoveryMs?: number;
  stranded?: number;
  failMs?: number;
  health?: string;
  peakRssMb?: number;
  private readonly started = Date.now();
  /** Extra state written with the history on failure (e.g. Redis contents). */
  history: Record<string, unknown> = {};

  constructor(
    readonly id: string,
    readonly title: string,
  ) {}

  /** Records a named check; never throws (all failures are reported together in finish). */
  check(name: string, ok: boolean, detail?: unknown): boolean {
    this.checks.push({ name, ok, detail: detail === undefined ? undefined : typeof detail === "string" ? detail : JSON.stringify(detail) });
    return ok;
  }

  note(text: string): void {
    this.notes.push(text);
  }

  /** Takes the checker's figures as this scenario's lost/duplicates. */
  figuresFrom(f: Figures, label = ""): void {
    this.figures[label || "check"] = f;
    this.lost = (this.lost ?? 0) + f.lost;
    this.duplicates = (this.duplicates ?? 0) + f.duplicates;
  }

  private write(error?: unknown): ScenarioResult {
    const failed = this.checks.filter((c) => !c.ok);
    const result: ScenarioResult = {
      id: this.id,
      title: this.title,
      pass: failed.length === 0 && error === undefined,
      lost: this.lost,
      duplicates: this.duplicates,
      recoveryMs: this.recoveryMs,
      stranded: this.stranded,
      failMs: this.failMs,
      health: this.health,
      peakRssMb: this.peakRssMb,
      notes: error ? [...this.notes, `error: ${error instanceof Error ? error.message : String(error)}`] : this.notes,
      checks: this.checks,
      figures: this.figures,
      durationMs: Date.now() - this.started,
    };
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, `${this.id}.json`), JSON.stringify(result, null, 2));
    const historyFile = join(ARTIFACTS, `${this.id}.json`);
    if (!result.pass) {
      writeFileSync(historyFile, JSON.stringify({ ...result, ledger: this.ledger.toJSON(), ...this.history }, null, 1));
    } else {
      rmSync(historyFile, { force: true });
    }
    return result;
  }

  /** Runs the scenario body; records an exception as a failure (with the history) and rethrows it. */
  async run(body: () => Promise<void>): Promise<void> {
    try {
      await body();
    } catch (err) {
      this.write(err);
      throw err;
    }
    const result = this.write();
    const failed = result.checks.filter((c) => !c.ok);
    expect(failed, `failed checks (history in test-artifacts/chaos/${this.id}.json)`).toEqual([]);
  }
}

