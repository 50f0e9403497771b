/**
 * Preload of the stage-timing diagnostic (stages.ts), for the server child and
 * the agent processes: `node --import ./dist-bench/stage-hooks.js …`.
 *
 * It wraps methods of the built classes (dist/) to stamp, per item, when each
 * stage of its way happened, on CLOCK_MONOTONIC (monoUs, one clock for every
 * process), and at exit writes the stamps to $SY_STAGES_DIR/<pid>.json with
 * the process's GC pauses and, with SY_STAGES_LOOP=1, its event-loop stalls.
 * Items are known by the `seq` at the start of their JSON payload (lib.ts
 * jsonItem); deliveries and settles by the fence the lease gave them.
 *
 * The wrapped methods are private ones of the queue core and the client: a
 * method that is missing (renamed by a rewrite) is reported and its stage
 * left empty. Without SY_STAGES_DIR it only applies SY_NAGLE and
 * SY_H2_WINDOW (see forceTransport), for A/B runs (transport-ab.ts).
 */
import http2 from "node:http2";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance, PerformanceObserver } from "node:perf_hooks";
import { monoUs } from "./lib.js";

const dir = process.env.SY_STAGES_DIR;
/** Stage name → seq → time (µs). */
const stamps = new Map<string, Map<number, number>>();
/** Fence → seq, for the deliveries this process saw. */
const fenceSeq = new Map<number, number>();
const missing: string[] = [];
const gc: [number, number, number][] = [];
const stalls: [number, number][] = [];
/** How the lease that returned each item was started: 0 the pump went on, 1 a push woke it, 2 its blocking read returned. */
const via = new Map<number, number>();

function stamp(stage: string, seq: number, at = monoUs()): void {
  if (!Number.isInteger(seq) || seq < 0) return;
  let m = stamps.get(stage);
  if (!m) stamps.set(stage, (m = new Map()));
  if (!m.has(seq)) m.set(seq, at);
}

/** The number at byte `from` of `p`, and where it ends; -1 when there is none. */
function digitsAt(p: Uint8Array, from: number): [number, number] {
  let n = 0;
  let i = from;
  for (; i < p.length && i < from + 17; i++) {
    const c = p[i];
    if (c < 0x30 || c > 0x39) break;
    n = n * 10 + (c - 0x30);
  }
  return i > from ? [n, i] : [-1, i];
}

/** The seq of a payload `{"seq":N,…` (jsonItem's), or -1. */
export function seqOfJson(p: Uint8Array | undefined): number {
  if (!p || p[0] !== 0x7b || p[2] !== 0x73) return -1;
  return digitsAt(p, 7)[0];
}

/** The send time of a payload `{"seq":N,"t":T,…`, or -1. */
function timeOfJson(p: Uint8Array | undefined): number {
  if (!p || p[0] !== 0x7b || p[2] !== 0x73) return -1;
  const [, end] = digitsAt(p, 7);
  return digitsAt(p, end + 5)[0];
}

type Fn = (...args: any[]) => any; // eslint-disable-line @typescript-eslint/no-explicit-any

/** Wraps `proto[name]`; `around` gets the original and the call's this and arguments. */
function wrap(what: string, proto: Record<string, unknown> | undefined, name: string, around: (orig: Fn, self: any, args: any[]) => unknown): void {
  const orig = proto?.[name];
  if (typeof orig !== "function") {
    missing.push(`${what}.${name}`);
    return;
  }
  proto![name] = function (this: unknown, ...args: unknown[]) {
    return around(orig as Fn, this, args);
  };
}

const after = (p: unknown, fn: () => void) => {
  if (p && typeof (p as Promise<unknown>).then === "function") (p as Promise<unknown>).then(fn, () => undefined);
  return p;
};

/**
 * Transport settings of every HTTP/2 server made from now on (grpc-js creates
 * them at bind), to compare them. SY_NAGLE=on turns Nagle's algorithm back on
 * for accepted sockets, after Node's Http2Session turned it off (it calls
 * setNoDelay() on every session's socket, server side too): what Nagle would
 * cost. SY_H2_WINDOW=bytes sets the initial stream window and each session's
 * connection window.
 */
function forceTransport(): void {
  const nagle = process.env.SY_NAGLE === "on";
  const window = Number(process.env.SY_H2_WINDOW ?? 0);
  if (!nagle && !window) return;
  const create = http2.createServer as Fn;
  (http2 as { createServer: Fn }).createServer = (options: http2.ServerOptions, ...rest: unknown[]) => {
    const server = create(window ? { ...options, settings: { ...options.settings, initialWindowSize: window } } : options, ...rest) as http2.Http2Server;
    // Runs after http2's own connection listener, which made the session (and set no-delay).
    if (nagle) server.on("connection", (socket: import("node:net").Socket) => socket.setNoDelay(false));
    if (window) server.on("session", (session) => session.setLocalWindowSize(window));
    return server;
  };
}

async function install(): Promise<void> {
  const { Queues } = await import("../dist/queue/queues.js");
  const { QueueDispatcher } = await import("../dist/queue/dispatcher.js");
  const { Settler } = await import("../dist/queue/settler.js");
  const { decodeItem } = await import("../dist/queue/envelope.js");
  const { EnqueueStream } = await import("../dist/client/enqueue-stream.js");
  const { LeaseSession } = await import("../dist/client/client.js");
  const P = (c: { prototype: unknown }) => c.prototype as Record<string, unknown>;
  type Items = { count?: number; length?: number; payload?: (i: number) => Uint8Array } & { [i: number]: { payload: Uint8Array } };
  const seqsOf = (items: Items): number[] => {
    const n = items.count ?? items.length ?? 0;
    const out: number[] = [];
    for (let i = 0; i < n; i++) out.push(seqOfJson(typeof items.payload === "function" ? items.payload(i) : items[i]?.payload));
    return out;
  };

  // ---- producer (client)
  wrap("EnqueueStream", P(EnqueueStream), "write", (orig, self, [p]) => {
    for (const item of p.request.items as { payload: Uint8Array }[]) {
      const s = seqOfJson(item.payload);
      stamp("p.call", s, timeOfJson(item.payload));
      stamp("p.write", s);
    }
    return orig.call(self, p);
  });
  wrap("EnqueueStream", P(EnqueueStream), "answered", (orig, self, [stream, res]) => {
    const p = self.pending?.get(res.id);
    if (p) for (const s of seqsOf(p.request.items)) stamp("p.answer", s);
    return orig.call(self, stream, res);
  });

  // ---- server
  /** Framed values of a prepared enqueue → the seqs of its items. */
  const prepared = new WeakMap<object, number[]>();
  wrap("Queues", P(Queues), "enqueueIds", (orig, self, args) => {
    for (const s of seqsOf(args[1])) stamp("s.read", s);
    return orig.apply(self, args);
  });
  wrap("Queues", P(Queues), "prepareFor", (orig, self, args) => {
    const seqs = seqsOf(args[1]);
    const r = orig.apply(self, args) as { values: object };
    prepared.set(r.values, seqs);
    return r;
  });
  wrap("Queues", P(Queues), "push", (orig, self, args) => {
    const seqs = (args[2] as object[]).flatMap((v) => prepared.get(v) ?? []);
    for (const s of seqs) stamp("s.push", s);
    return after(orig.apply(self, args), () => {
      const t = monoUs();
      for (const s of seqs) stamp("s.pushed", s, t);
    });
  });
  const woken = new WeakMap<object, number>();
  wrap("QueueDispatcher", P(QueueDispatcher), "pushed", (orig, self) => {
    if (self.wake) woken.set(self, 1);
    return orig.call(self);
  });
  wrap("QueueDispatcher", P(QueueDispatcher), "waitForItems", (orig, self) => {
    woken.set(self, 2);
    return orig.call(self);
  });
  // A lease goes out on its own (take) or with a settle (takeBeside); either way its answer's items are the
  // deliveries it resolves to. Each call is stamped on its own: a pump may send a second lease right behind
  // the first (credit beyond one call's batch), and the first's items were sent with the first.
  const leased = (orig: Fn, self: object, args: unknown[]) => {
    const t0 = monoUs();
    const how = woken.get(self) ?? 0;
    woken.delete(self);
    return (orig.apply(self, args) as Promise<{ value: Buffer; ref: { fence: number } }[]>).then((taken) => {
      const t1 = monoUs();
      for (const t of taken) {
        const s = seqOfJson(decodeItem(t.value).payload);
        fenceSeq.set(t.ref.fence, s);
        stamp("s.lease", s, t0);
        stamp("s.leased", s, t1);
        if (!via.has(s)) via.set(s, how);
      }
      return taken;
    });
  };
  wrap("QueueDispatcher", P(QueueDispatcher), "take", leased);
  wrap("QueueDispatcher", P(QueueDispatcher), "takeBeside", leased);
  wrap("QueueDispatcher", P(QueueDispatcher), "takePushed", (orig, self, args) => {
    woken.set(self, 3);
    return leased(orig, self, args);
  });
  wrap("QueueDispatcher", P(QueueDispatcher), "distribute", (orig, self, [taken]) => {
    const t = monoUs();
    for (const x of taken as { ref: { fence: number } }[]) stamp("s.deliver", fenceSeq.get(x.ref.fence) ?? -1, t);
    return orig.call(self, taken);
  });
  wrap("Queues", P(Queues), "ackMany", (orig, self, args) => {
    const seqs = (args[0] as string[]).map((token) => fenceSeq.get(fenceOfToken(token)) ?? -1);
    for (const s of seqs) stamp("s.ackRead", s);
    return after(orig.apply(self, args), () => {
      const t = monoUs();
      for (const s of seqs) stamp("s.acked", s, t);
    });
  });
  // Settle ops name their delivery as "<fence>@<owner>" (SettleOp).
  const ackSeqs = (ops: { action: string; delivery: string }[]) =>
    ops.filter((o) => o.action === "ack").map((o) => fenceSeq.get(Number(o.delivery.slice(0, o.delivery.indexOf("@")))) ?? -1);
  wrap("Settler", P(Settler), "apply", (orig, self, [batch]) => {
    for (const s of ackSeqs(batch.ops)) stamp("s.settle", s);
    return orig.call(self, batch);
  });
  // Stamped as the settle's result comes back: this callback is registered before the caller's.
  wrap("Settler", P(Settler), "settleMany", (orig, self, args) => {
    const seqs = ackSeqs(args[1]);
    return after(orig.apply(self, args), () => {
      const t = monoUs();
      for (const s of seqs) stamp("s.settled", s, t);
    });
  });

  // ---- worker (client)
  const tokenSeq = new Map<string, number>();
  wrap("LeaseSession", P(LeaseSession), "push", (orig, self, [deliveries]) => {
    const t = monoUs();
    for (const d of deliveries as { payload: Uint8Array; leaseToken: string }[]) {
      const s = seqOfJson(d.payload);
      tokenSeq.set(d.leaseToken, s);
      stamp("w.read", s, t);
    }
    return orig.call(self, deliveries);
  });
  wrap("LeaseSession", P(LeaseSession), "flushAcks", (orig, self) => {
    const t = monoUs();
    for (const token of (self.acks ?? []) as string[]) stamp("w.ack", tokenSeq.get(token) ?? -1, t);
    return orig.call(self);
  });
}

/** The fence in a lease token (see src/queue/token.ts), or -1. */
let fenceOfToken = (_token: string): number => -1;

async function installTokens(): Promise<void> {
  const { parseToken } = await import("../dist/queue/token.js");
  fenceOfToken = (token) => {
    try {
      return parseToken(token).fence;
    } catch {
      return -1;
    }
  };
}

function watchPauses(): void {
  const offset = monoUs() - performance.now() * 1000;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gc.push([e.startTime * 1000 + offset, e.duration * 1000, (e as { detail?: { kind?: number } }).detail?.kind ?? 0]);
  }).observe({ entryTypes: ["gc"] });
  if (process.env.SY_STAGES_LOOP !== "1") return;
  // A 1 ms timer that notes when it ran late by more than 2 ms: the event loop was blocked (or not scheduled).
  let last = monoUs();
  setInterval(() => {
    const now = monoUs();
    if (now - last > 3000) stalls.push([last, now - last - 1000]);
    last = now;
  }, 1).unref();
}

forceTransport();
if (dir) {
  await Promise.all([install(), installTokens()]);
  watchPauses();
  process.on("exit", () => {
    const out = Object.fromEntries([...stamps].map(([k, m]) => [k, [...m]]));
    writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify({ pid: process.pid, argv: process.argv.slice(1), stamps: out, via: [...via], gc, stalls, missing }));
  });
}
