/**
 * Stage-timing diagnostic across processes (issue 13, "where the time goes"):
 * the deployed shape (server child, a producer process, a worker process)
 * with stage-hooks.ts preloaded in each, so every item's way is stamped in
 * every process on one clock. Prints each stage's spread, the slowest items
 * stage by stage, and the GC pauses and event-loop stalls that overlap them.
 *
 *   node dist-bench/stages.js [--mode latency|consume] [--rate 500] [--items 3000]
 *        [--warmup 250] [--c 10] [--nagle] [--loop] [--slowest 15]
 *        [--server-node-args "--max-semi-space-size=4"] [--agent-node-args "--trace-gc"]
 *
 * latency: the producer sends single items at --rate to a waiting worker;
 *   stages from enqueue() to the handler, then the ack.
 * consume: --items prefilled, one worker at --c (use 1): the cycle from one
 *   item's handler to the next item's, stage by stage.
 * serial: the producer enqueues one item at a time, awaiting each (no worker):
 *   the cycle from one enqueue() to the next, stage by stage.
 * --nagle turns Nagle's algorithm back on for the server's accepted sockets
 *   (Node's http2 turns it off for every session): what it would cost;
 *   --loop adds a 1 ms event-loop probe in each process.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { constants } from "node:perf_hooks";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../dist/client/client.js";
import { Agent, type Consumed } from "./agents.js";
import { startBenchRedis } from "./env.js";
import { startServer } from "./streams.js";
import { deferred, jsonItem, leftovers, log, pool, sleep, spread, within } from "./lib.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : def;
};
const MODE = arg("mode", "latency");
const RATE = Number(arg("rate", "500"));
const ITEMS = Number(arg("items", MODE === "latency" ? "3000" : "5000"));
const WARMUP = Number(arg("warmup", MODE === "latency" ? "250" : "200"));
const C = Number(arg("c", MODE === "latency" ? "10" : "1"));
const NAGLE = process.argv.includes("--nagle");
const LOOP = process.argv.includes("--loop");
const SLOWEST = Number(arg("slowest", "15"));

interface Dump {
  pid: number;
  stamps: Record<string, [number, number][]>;
  via: [number, number][];
  gc: [number, number, number][];
  stalls: [number, number][];
  missing: string[];
}

type Times = Map<string, Map<number, number>>;

async function run(): Promise<{ dumps: Map<number, Dump>; roles: Record<string, number>; consumed: Consumed }> {
  const dir = mkdtempSync(join(tmpdir(), "sy-stages-"));
  const hooks = ["--import", join(here, "stage-hooks.js")];
  const env = { ...process.env, SY_STAGES_DIR: dir, SY_STAGES_LOOP: LOOP ? "1" : "0", ...(NAGLE ? { SY_NAGLE: "on" } : {}) };
  const redis = await startBenchRedis();
  leftovers.add(redis.server.process);
  const nodeArgs = (name: string) => [...(arg(name, "") ?? "").split(" ").filter(Boolean), ...hooks];
  const { child: server, address } = await startServer(`unix://${redis.socketPath}`, nodeArgs("server-node-args"), env as Record<string, string>);
  leftovers.add(server);
  const agentArgs = nodeArgs("agent-node-args");
  const [producer, worker] = await Promise.all([Agent.start("switchyard", agentArgs, env), Agent.start("switchyard", agentArgs, env)]);
  const admin = new SwitchyardClient(address);
  try {
    await Promise.all([producer, worker].map((a) => a.request("connect", { address })));
    const name = "{stages}";
    await admin.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });
    const total = WARMUP + ITEMS;
    if (MODE === "consume") {
      await pool(Math.ceil(total / 1000), 1, (b) => {
        const items = Array.from({ length: Math.min(1000, total - b * 1000) }, (_, i) => JSON.stringify(jsonItem(b * 1000 + i)));
        return admin.enqueue(name, items);
      });
    }
    // Serial mode times the producer alone: no worker takes the items meanwhile.
    let consumed: Consumed = { handled: 0, lastAt: 0, latencies: [] };
    const all = deferred();
    if (MODE !== "serial") {
      await worker.request("prepare", { queue: name, concurrency: C, latencyItems: total, progressMs: 20 });
      worker.onProgress = (p) => {
        if (p.handled >= total) all.resolve();
      };
      await worker.request("go");
    } else all.resolve();
    if (MODE !== "consume") {
      await sleep(200);
      await producer.request("paced", { queue: name, rate: MODE === "serial" ? 0 : RATE, count: total });
    }
    await within(all.promise, 300_000, "every item to be handled");
    await sleep(100); // the last acks
    if (MODE !== "serial") consumed = await worker.request<Consumed>("stop");
    const roles = { producer: producer.child.pid!, worker: worker.child.pid!, server: server.pid! };
    admin.close();
    await Promise.all([producer.stop(), worker.stop()]);
    server.kill("SIGTERM");
    await new Promise((ok) => (server.exitCode !== null ? ok(undefined) : server.once("exit", ok)));
    const dumps = new Map<number, Dump>();
    for (const f of readdirSync(dir)) {
      const d = JSON.parse(readFileSync(join(dir, f), "utf8")) as Dump;
      dumps.set(d.pid, d);
    }
    return { dumps, roles, consumed };
  } finally {
    admin.close();
    server.kill("SIGKILL");
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const ms = (us: number) => (Number.isFinite(us) ? (us / 1000).toFixed(2) : "—");

function merge(dumps: Map<number, Dump>, consumed: Consumed): Times {
  const times: Times = new Map();
  for (const d of dumps.values()) {
    for (const [stage, pairs] of Object.entries(d.stamps)) times.set(stage, new Map(pairs));
    if (d.missing.length) log(`pid ${d.pid}: no stamps for ${[...new Set(d.missing)].join(", ")} (renamed?)`);
  }
  // The handler's start: the worker measured it against the payload's send time (0 for prefilled items).
  const call = times.get("p.call") ?? new Map<number, number>();
  const handler = new Map<number, number>();
  consumed.latencies!.forEach((lat, seq) => {
    if (Number.isFinite(lat)) handler.set(seq, (call.get(seq) ?? 0) + lat);
  });
  times.set("w.handler", handler);
  return times;
}

function row(label: string, xs: number[]): string {
  const s = spread(xs);
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return `${label.padEnd(52)} p50 ${ms(s.p50).padStart(7)}  p90 ${ms(s.p90).padStart(7)}  p99 ${ms(s.p99).padStart(7)}  max ${ms(s.max).padStart(7)}  mean ${ms(mean).padStart(7)}`;
}

/** Pauses (GC) and stalls (event loop) of every process that overlap [from, to], by process: count and longest. */
function overlapping(dumps: Map<number, Dump>, roleOf: (pid: number) => string, from: number, to: number): string {
  const out: string[] = [];
  const summary = (what: string, xs: number[]) => (xs.length ? `${what} ${xs.length}× (max ${ms(Math.max(...xs))})` : "");
  for (const d of dumps.values()) {
    const gcs = d.gc.filter(([start, dur]) => start < to && start + dur > from && dur > 500).map(([, dur]) => dur);
    const stalls = d.stalls.filter(([start, late]) => start < to && start + late > from).map(([, late]) => late);
    const parts = [summary("GC", gcs), summary("loop stall", stalls)].filter(Boolean);
    if (parts.length) out.push(`${roleOf(d.pid)} ${parts.join(", ")}`);
  }
  return out.join("; ");
}

/** A GC entry's detail.kind (perf_hooks' NODE_PERFORMANCE_GC_* constants) → its name. */
const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: "minor",
  [constants.NODE_PERFORMANCE_GC_MAJOR]: "major",
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weak callbacks",
};

/** Each process's GC pauses (and stalls, with --loop) within [from, to]. */
function pauses(dumps: Map<number, Dump>, roleOf: (pid: number) => string, from: number, to: number): void {
  process.stdout.write(`pauses during the measured ${ms(to - from)} ms:\n`);
  for (const d of dumps.values()) {
    const gcs = d.gc.filter(([start]) => start >= from && start <= to);
    const kinds = [...new Set(gcs.map(([, , kind]) => kind))].map((kind) => {
      const durs = gcs.filter(([, , k]) => k === kind).map(([, dur]) => dur);
      return `${durs.length} ${GC_KINDS[kind] ?? kind} (max ${ms(Math.max(...durs))})`;
    });
    const total = gcs.reduce((a, [, dur]) => a + dur, 0);
    const stalls = d.stalls.filter(([start]) => start >= from && start <= to).map(([, late]) => late);
    process.stdout.write(
      `  ${roleOf(d.pid).padEnd(9)} GC ${ms(total)} ms in all: ${kinds.join(", ") || "none"}` +
        (LOOP ? `; event-loop stalls > 2 ms: ${stalls.length}, max ${ms(Math.max(0, ...stalls))} ms` : "") + "\n",
    );
  }
}

function latencyReport(times: Times, dumps: Map<number, Dump>, roleOf: (pid: number) => string, via: Map<number, number>): void {
  const stages: [string, string, string][] = [
    ["p.call", "p.write", "producer: enqueue() → stream write"],
    ["p.write", "s.read", "hop producer → server"],
    ["s.read", "s.push", "server: read → push sent"],
    ["s.push", "s.pushed", "(push round trip, beside the lease)"],
    ["s.push", "s.lease", "server: push → lease sent (write, or wake-up)"],
    ["s.lease", "s.leased", "lease script round trip"],
    ["s.leased", "s.deliver", "server: lease back → delivery written"],
    ["s.deliver", "w.read", "hop server → worker"],
    ["w.read", "w.handler", "worker: read → handler"],
    ["p.call", "w.handler", "TOTAL enqueue() → handler"],
    ["w.handler", "w.ack", "worker: handler → ack written"],
    ["w.ack", "s.ackRead", "hop worker → server (ack)"],
    ["s.ackRead", "s.settle", "server: ack read → settle sent"],
    ["s.settle", "s.settled", "settle script round trip"],
    ["p.write", "p.answer", "(producer: write → answer)"],
  ];
  const seqs = [...(times.get("w.handler")?.keys() ?? [])].filter((s) => s >= WARMUP).sort((a, b) => a - b);
  const d = (a: string, b: string, s: number) => (times.get(b)?.get(s) ?? NaN) - (times.get(a)?.get(s) ?? NaN);
  process.stdout.write(`\nstages over ${seqs.length} items (ms):\n`);
  for (const [a, b, label] of stages) {
    const xs = seqs.map((s) => d(a, b, s)).filter(Number.isFinite);
    if (xs.length) process.stdout.write(row(label, xs) + "\n");
  }
  const viaCounts = [0, 0, 0, 0];
  for (const s of seqs) viaCounts[via.get(s) ?? 0]++;
  process.stdout.write(
    `leases that returned an item: ${viaCounts[3]} in the push's own call, ${viaCounts[1]} after a push woke the pump, ` +
      `${viaCounts[2]} after its blocking read returned, ${viaCounts[0]} with the pump already going\n`,
  );
  for (const [code, what] of [[3, "leased with their push"], [1, "woken by a push"], [2, "woken by the blocking read"], [0, "pump going"]] as const) {
    const xs = seqs.filter((s) => (via.get(s) ?? 0) === code);
    if (xs.length) {
      process.stdout.write(row(`  TOTAL, items ${what}`, xs.map((s) => d("p.call", "w.handler", s))) + "\n");
      process.stdout.write(row(`  push sent → lease sent, items ${what}`, xs.map((s) => d("s.push", "s.lease", s))) + "\n");
    }
  }
  const total = (s: number) => d("p.call", "w.handler", s);
  const slow = [...seqs].sort((a, b) => total(b) - total(a));
  const top = slow.slice(0, Math.max(1, Math.ceil(seqs.length / 100)));
  process.stdout.write(`\nthe slowest 1% (${top.length} items): mean ms per stage\n`);
  for (const [a, b, label] of stages.slice(0, 10)) {
    const xs = top.map((s) => d(a, b, s)).filter(Number.isFinite);
    process.stdout.write(`  ${label.padEnd(50)} ${ms(xs.reduce((x, y) => x + y, 0) / xs.length)}\n`);
  }
  process.stdout.write(`\nthe ${SLOWEST} slowest items (ms): total | c→write | hop p→s | s read→push | push→lease | lease rtt | →deliver | hop s→w | read→handler | via | overlapping pauses\n`);
  const t0 = Math.min(...seqs.map((s) => times.get("p.call")!.get(s)!));
  for (const s of slow.slice(0, SLOWEST)) {
    const cells = [
      ["p.call", "p.write"], ["p.write", "s.read"], ["s.read", "s.push"], ["s.push", "s.lease"], ["s.lease", "s.leased"],
      ["s.leased", "s.deliver"], ["s.deliver", "w.read"], ["w.read", "w.handler"],
    ].map(([a, b]) => ms(d(a, b, s)).padStart(6));
    const from = times.get("p.call")!.get(s)!;
    process.stdout.write(
      `  #${String(s).padEnd(5)} at ${((from - t0) / 1e6).toFixed(2).padStart(5)} s: ${ms(total(s)).padStart(6)} | ${cells.join(" | ")} | ${via.get(s) ?? "?"} | ${overlapping(dumps, roleOf, from, from + total(s))}\n`,
    );
  }
}

type At = (stage: string, seq: number) => number;

/**
 * Items after the warm-up in the order of their `by` stamp; for each of
 * `parts` (from `at`, a reader of any stage's stamp), its spread over every
 * pair of neighbours (an item and the next), and the rate over the run.
 */
function cycleReport(times: Times, by: string, title: string, unit: string, parts: (at: At) => [string, (a: number, b: number) => number][]): void {
  const stamps = times.get(by)!;
  const order = [...stamps.keys()].filter((s) => s >= WARMUP).sort((a, b) => stamps.get(a)! - stamps.get(b)!);
  const at: At = (stage, seq) => times.get(stage)?.get(seq) ?? NaN;
  process.stdout.write(`\n${title}: ${order.length} items; per item (ms):\n`);
  for (const [label, f] of parts(at)) {
    const xs: number[] = [];
    for (let i = 0; i + 1 < order.length; i++) xs.push(f(order[i], order[i + 1]));
    const ok = xs.filter(Number.isFinite);
    if (ok.length) process.stdout.write(row(label, ok) + "\n");
  }
  const span = stamps.get(order[order.length - 1])! - stamps.get(order[0])!;
  process.stdout.write(`rate ${(((order.length - 1) / span) * 1e6).toFixed(0)} ${unit}/s (mean over the run)\n`);
}

/** Serial enqueue: from one enqueue() to the next. */
const serialReport = (times: Times) =>
  cycleReport(times, "p.call", "serial enqueue", "calls", (at) => [
    ["producer: enqueue() → stream write (gathering)", (s) => at("p.write", s) - at("p.call", s)],
    ["hop producer → server", (s) => at("s.read", s) - at("p.write", s)],
    ["server: read → push sent", (s) => at("s.push", s) - at("s.read", s)],
    ["push round trip (Redis)", (s) => at("s.pushed", s) - at("s.push", s)],
    ["server answer → hop → producer has it", (s) => at("p.answer", s) - at("s.pushed", s)],
    ["producer: answer → next enqueue()", (s, next) => at("p.call", next) - at("p.answer", s)],
    ["CYCLE: one enqueue() to the next", (s, next) => at("p.call", next) - at("p.call", s)],
  ]);

/** Consume at --c (1): from one item's read by the worker to the next's. */
const consumeReport = (times: Times) =>
  cycleReport(times, "w.read", `consume at c = ${C}, each stage from one item's read to the next's`, "items", (at) => [
    ["worker: read → handler", (p) => at("w.handler", p) - at("w.read", p)],
    ["worker: handler → ack written (gathering)", (p) => at("w.ack", p) - at("w.handler", p)],
    ["hop worker → server (ack)", (p) => at("s.ackRead", p) - at("w.ack", p)],
    ["server: ack read → settle sent (gathering)", (p) => at("s.settle", p) - at("s.ackRead", p)],
    ["settle script round trip", (p) => at("s.settled", p) - at("s.settle", p)],
    // A lease carried by the settle call (settle-lease.lua) went out before the settle's answer: negative here, and its
    // round trip below is the settle's.
    ["server: settled → next lease sent (< 0: sent with the settle)", (p, s) => at("s.lease", s) - at("s.settled", p)],
    ["lease script round trip", (_p, s) => at("s.leased", s) - at("s.lease", s)],
    ["server: lease back → delivery written", (_p, s) => at("s.deliver", s) - at("s.leased", s)],
    ["hop server → worker", (_p, s) => at("w.read", s) - at("s.deliver", s)],
    ["CYCLE: one item's read → the next's", (p, s) => at("w.read", s) - at("w.read", p)],
  ]);

async function main(): Promise<void> {
  const load = loadavg();
  log(`mode ${MODE}, ${MODE === "latency" ? `${RATE}/s, ` : ""}${ITEMS} items after ${WARMUP}, c = ${C}, Nagle ${NAGLE ? "on (what-if)" : "off (as Node's http2 sets it)"}; load ${load.map((x) => x.toFixed(2)).join(" / ")}`);
  const { dumps, roles, consumed } = await run();
  const roleOf = (pid: number) => Object.entries(roles).find(([, p]) => p === pid)?.[0] ?? String(pid);
  const times = merge(dumps, consumed);
  const via = new Map(dumps.get(roles.server)?.via ?? []);
  if (MODE === "latency") latencyReport(times, dumps, roleOf, via);
  else if (MODE === "serial") serialReport(times);
  else consumeReport(times);
  process.stdout.write("\n");
  const handled = [...(MODE === "serial" ? times.get("p.answer")! : times.get("w.handler")!)].filter(([seq]) => seq >= WARMUP).map(([, t]) => t);
  const sent = MODE !== "consume" ? [...times.get("p.call")!].filter(([seq]) => seq >= WARMUP).map(([, t]) => t) : [...times.get("w.read")!].filter(([seq]) => seq >= WARMUP).map(([, t]) => t);
  pauses(dumps, roleOf, Math.min(...sent), Math.max(...handled));
  log(`load at the end ${loadavg().map((x) => x.toFixed(2)).join(" / ")}`);
}

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    for (const p of leftovers) p.kill("SIGKILL");
    process.exit(130);
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`stages failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  for (const p of leftovers) p.kill("SIGKILL");
  process.exit(1);
});
