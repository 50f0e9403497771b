/**
 * The real system a model history runs against: one Redis, Switchyard
 * instances in this process on one ManualClock, each reaching Redis through a
 * link of its own that can be cut (every connection reset, new ones welcome)
 * or taken down for good (a killed instance), and Lease sessions whose
 * deliveries and settle results are collected as they arrive.
 */
import type { Clock, ManualClock, Timer } from "../../../src/clock.js";
import type { Delivery, SettleResult } from "../../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../../src/client/client.js";
import { keysOf } from "../../../src/queue/declaration.js";
import { decodeItem } from "../../../src/queue/envelope.js";
import type { StandaloneRedis } from "../../helpers/redis.js";
import { startLink, type Link } from "../../helpers/link.js";
import { startSwitchyard, type TestSwitchyard } from "../../helpers/switchyard.js";
import { createLogger, withFields, type LogLevel } from "../../../src/log.js";

/** Watchdog passes and instance beats, on the manual clock. */
export const WATCHDOG_MS = 1000;
/** Silence after which an instance counts as dead. */
export const INSTANCE_TIMEOUT_MS = 5000;
/** A stream's check of what it holds (a delivery settled or recovered elsewhere frees its credit then). */
export const HEARTBEAT_MS = 2000;

/** An instance's view of the shared manual clock; once it is killed, none of its timers fires again (a dead process runs nothing). */
class InstanceClock implements Clock {
  dead = false;
  constructor(private readonly base: ManualClock) {}
  now(): number {
    return this.base.now();
  }
  setTimer(ms: number, fn: () => unknown): Timer {
    return this.base.setTimer(ms, () => (this.dead ? undefined : fn()));
  }
}

export interface Instance {
  /** "i<slot>.<generation>", for the history. */
  readonly name: string;
  readonly sy: TestSwitchyard;
  readonly link: Link;
  readonly clock: InstanceClock;
  readonly startedAt: number;
  state: "live" | "killed" | "stopped";
  killedAt?: number;
}

export interface Session {
  readonly id: number;
  readonly inst: Instance;
  readonly queue: string;
  readonly lease: LeaseSession;
  credit: number;
  /** The most credit it ever had (deliveries held never exceed it). */
  maxCredit: number;
  /** Deliveries it no longer holds that its instance may still count against its credit until its next check: token → since when. */
  readonly phantoms: Map<string, number>;
  open: boolean;
  /** Deliveries that arrived and the model has not taken in yet. */
  readonly arrived: Delivery[];
  readonly results: SettleResult[];
}

/** One stored value as the model sees it: its payload (hex) and the deliveries its history counts. */
export interface Stored {
  key: string;
  count: number;
}

/** A queue's keys, read in one MULTI. */
export interface QueueSnapshot {
  ready: Stored[];
  delayed: (Stored & { due: number })[];
  dead: Stored[];
  processing: Stored[];
  /** Live delivery records: field "<fence>@<owner>" → claim kind and value. */
  records: Map<string, Stored & { kind: string; member: string }>;
  live: number;
  /** Recovery set member (hex) → claim time. */
  claims: Map<string, number>;
}

export const stored = (value: Buffer): Stored => {
  const item = decodeItem(value);
  return { key: Buffer.from(item.payload).toString("hex"), count: item.deliveries };
};

/** Killed instances' shutdowns, which wait seconds for returns that cannot reach Redis: awaited once, after every history. */
export const killed: Promise<void>[] = [];

export class World {
  readonly instances: (Instance | undefined)[] = [];
  readonly sessions: Session[] = [];
  private generation = 0;

  constructor(
    readonly redis: StandaloneRedis,
    readonly clock: ManualClock,
  ) {}

  live(): Instance[] {
    return this.instances.filter((i): i is Instance => i?.state === "live");
  }

  async start(slot: number): Promise<Instance> {
    const link = await startLink(this.redis.socketPath);
    const clock = new InstanceClock(this.clock);
    const name = `i${slot}.${++this.generation}`;
    // Each line names its instance (SWITCHYARD_LOG_LEVEL=warn shows why a history's calls failed).
    const log = withFields(createLogger((process.env.SWITCHYARD_LOG_LEVEL as LogLevel | undefined) ?? "error"), { instance: name });
    const sy = await startSwitchyard(
      { target: { kind: "standalone", url: `redis://${link.address}` } },
      { clock, log, config: { instanceTimeoutMs: INSTANCE_TIMEOUT_MS, watchdogIntervalMs: WATCHDOG_MS, heartbeatIntervalMs: HEARTBEAT_MS } },
    );
    const inst: Instance = { name, sy, link, clock, startedAt: this.clock.now(), state: "live" };
    this.instances[slot] = inst;
    return inst;
  }

  /** Kills an instance: its timers stop and its link goes down for good; its shutdown runs in the background, unable to return anything. */
  kill(inst: Instance): void {
    inst.clock.dead = true;
    inst.link.down();
    inst.state = "killed";
    inst.killedAt = this.clock.now();
    for (const s of this.sessions) if (s.inst === inst) s.open = false;
    killed.push(inst.sy.stop().catch(() => undefined));
  }

  /** Stops an instance gracefully: its streams end and their items go back. */
  async stop(inst: Instance): Promise<void> {
    inst.state = "stopped";
    for (const s of this.sessions) if (s.inst === inst) s.open = false;
    await inst.sy.stop();
    await inst.link.close();
  }

  async open(inst: Instance, queue: string, credit: number): Promise<Session> {
    const lease = inst.sy.client.lease(queue, credit);
    const s: Session = { id: this.sessions.length, inst, queue, lease, credit, maxCredit: credit, phantoms: new Map(), open: true, arrived: [], results: [] };
    lease.onSettleResult((r) => s.results.push(r));
    await lease.opened;
    void (async () => {
      for await (const d of lease) s.arrived.push(d);
    })().catch(() => undefined);
    this.sessions.push(s);
    return s;
  }

  async snapshot(names: readonly string[]): Promise<Map<string, QueueSnapshot>> {
    const inst = this.live()[0] ?? this.instances.find((i) => i);
    const m = this.redis.plain.multi();
    const configs = names.map((name) => inst!.sy.app.queues.registry.cached(name)!);
    for (const config of configs) {
      const keys = keysOf(config);
      m.lrangeBuffer(keys.queue, 0, -1);
      m.zrangeBuffer(keys.delayed, 0, -1, "WITHSCORES");
      m.lrangeBuffer(keys.deadLetter || "{none}", 0, -1);
      m.lrangeBuffer(keys.processing || "{none}", 0, -1);
      m.hgetallBuffer(keys.leases);
      m.zrangeBuffer(keys.recovery || "{none}", 0, -1, "WITHSCORES");
    }
    const replies = (await m.exec())!.map(([err, reply]) => {
      if (err) throw err;
      return reply;
    });
    const out = new Map<string, QueueSnapshot>();
    configs.forEach((config, i) => {
      const [ready, delayed, dead, processing, leases, claims] = replies.slice(i * 6, i * 6 + 6) as [Buffer[], Buffer[], Buffer[], Buffer[], Record<string, Buffer>, Buffer[]];
      const snap: QueueSnapshot = {
        ready: ready.map(stored),
        delayed: [],
        dead: config.deadLetterList ? dead.map(stored) : [],
        processing: config.processingList ? processing.map(stored) : [],
        records: new Map(),
        live: Number(leases.live ?? 0),
        claims: new Map(),
      };
      for (let j = 0; j < delayed.length; j += 2) snap.delayed.push({ ...stored(delayed[j]), due: Number(delayed[j + 1]) });
      for (let j = 0; j < claims.length; j += 2) snap.claims.set(claims[j].toString("hex"), Number(claims[j + 1]));
      for (const [field, record] of Object.entries(leases)) {
        if (!/^\d+@/.test(field)) continue;
        const value = record.subarray(2);
        const kind = record.subarray(0, 1).toString();
        const member = kind === "v" ? value : Buffer.concat([Buffer.from("\0SYC"), Buffer.from(field)]);
        snap.records.set(field, { ...stored(value), kind, member: member.toString("hex") });
      }
      out.set(config.name, snap);
    });
    return out;
  }

  /** Stops every live instance; a killed one's link stays down (see `killed`). */
  async close(): Promise<void> {
    for (const s of this.sessions) if (s.open) s.lease.cancel();
    await Promise.all(this.instances.map(async (inst) => {
      if (!inst) return;
      if (inst.state === "live") await inst.sy.stop().catch(() => undefined);
      await inst.link.close();
    }));
  }
}
