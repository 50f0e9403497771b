/**
 * The deployed-shape rows of `npm run bench` (issue 13): what they run, in
 * which order, and the table they make. See deployed.ts for how each is
 * measured.
 */
import type { Agent } from "./agents.js";
import { Deployed, type LatencySystem } from "./deployed.js";
import type { BenchRedis } from "./env.js";
import { spread } from "./lib.js";
import type { Rounds } from "./rounds.js";
import { fmtMs, fmtRate, fmtRatio, markdownTable, verdict } from "./table.js";

/** Row groups, as `--rows` names them. */
export const deployedGroups = ["enqueue", "consume", "latency", "python", "stream"] as const;
export type DeployedGroup = (typeof deployedGroups)[number];

/** Items per run; `scale` shrinks them (at least 1,000 for throughput rows). */
export function deployedSizes(scale: number) {
  const n = (x: number) => Math.max(1000, Math.round((x * scale) / 1000) * 1000);
  return {
    serial: n(5_000),
    /**
     * Per system, so that each side times half a second or more: Switchyard's side ran 0.1–0.2 s
     * a round with BullMQ's counts, too short a window on a noisy machine.
     */
    inFlight: { switchyard: n(150_000), bullmq: n(30_000) },
    batched: { switchyard: n(300_000), bullmq: n(50_000) },
    echoCalls: n(5_000),
    /** Bytes per echo message: about an EnqueueStream request of one 100-byte item. */
    echoBytes: 140,
    consume: [
      { key: "c1", workers: 1, c: 1, items: n(6_000), label: "c = 1" },
      { key: "c10", workers: 1, c: 10, items: n(15_000), label: "c = 10" },
      { key: "c100", workers: 1, c: 100, items: n(30_000), label: "c = 100" },
      { key: "4x25", workers: 4, c: 25, items: n(30_000), label: "4 processes × c = 25" },
    ],
    /**
     * Items per system and round, in `latencySlices` runs of `items / latencySlices` (Rounds.sliced),
     * each after `warmup` unrecorded: a second of them at 100/s, half of one at 500/s, as a rested
     * process is dear for its first second (bench/README.md, 4 December, evening).
     */
    latency: [
      { key: "100", rate: 100, items: Math.max(100, Math.round(1_600 * scale)), warmup: 100 },
      { key: "500", rate: 500, items: Math.max(250, Math.round(4_000 * scale)), warmup: 250 },
    ],
    latencySlices: 4,
    latencyConcurrency: 10,
    /**
     * Paced items per system run before the latency rows, not recorded. A paced item takes paths a
     * batch does not (a waiting stream woken, one item per script call), and V8 optimizes a function
     * only after thousands of calls: the warm-up's 500 left the server's paced path half compiled.
     */
    latencyWarmup: { rate: 1000, items: Math.max(500, Math.round(5_000 * scale)) },
    python: { c: 10, items: n(10_000) },
    stream: [
      { key: "c10", c: 10, items: n(15_000), label: "c = 10" },
      { key: "c100", c: 100, items: n(30_000), label: "c = 100" },
    ],
    /** The memory row: entries appended through Switchyard to a stream trimmed at MAXLEN ~ maxLen. */
    streamMemory: { entries: Math.round(1_200_000 * Math.min(1, scale)), maxLen: Math.round(1_000_000 * Math.min(1, scale)) },
  };
}

export type DeployedSizes = ReturnType<typeof deployedSizes>;

/** Runs the wanted groups, interleaved per row, recording into `rounds`. */
export async function runDeployed(
  rounds: Rounds,
  redis: BenchRedis,
  sizes: DeployedSizes,
  want: (g: DeployedGroup) => boolean,
  options: { serverNodeArgs?: string[]; agentNodeArgs?: string[]; pythonPath?: string; warmup: boolean },
): Promise<void> {
  const d = await Deployed.start(redis, { serverNodeArgs: options.serverNodeArgs, agentNodeArgs: options.agentNodeArgs, pythonPath: options.pythonPath });
  const rec = (metric: string) => async (value: number | Promise<number>) => rounds.record(metric, await value);
  // Every row but the stream memory's (one measure, not a rate) has an unrecorded pass before its rounds (Rounds.interleaved,
  // Rounds.sliced).
  const interleaved = (row: string, systems: [string, () => Promise<void>][]) => rounds.interleaved(row, systems, { warm: options.warmup });
  // Started before the warm-up, like every other agent: a process's first seconds (start-up, JIT,
  // its first collections) are not to fall in a measured round, its own or another's.
  let uncoalesced: Agent | undefined;
  try {
    if (want("enqueue")) uncoalesced = await d.uncoalescedProducer();
    if (options.warmup) {
      // Not recorded: JIT, connections and script loading in every process, in the shapes measured below
      // (a path first taken in a round's own time, a serial call's or a paced item's, is compiled there).
      for (const system of ["switchyard", "bullmq"] as const) {
        await d.enqueue(system, 2000, 1, 100);
        if (want("enqueue")) await d.enqueue(system, 1000, 1, 1);
        await d.consume(system, "reliable", 4, 25, 5000);
        await d.consume(system, "simple", 1, 10, 3000);
        if (want("latency")) await d.latency(system, 500, 500, 0, sizes.latencyConcurrency);
      }
      if (uncoalesced) {
        await d.enqueue("switchyard", 1000, 1, 1, uncoalesced);
        await d.rawEnqueue(1000, 1, 1);
        await d.echo("stream", 1000, sizes.echoBytes);
        await d.echo("push", 1000, sizes.echoBytes);
        await d.echo("unary", 500, sizes.echoBytes);
      }
      if (want("latency")) for (const relay of ["relay", "relay-push"] as const) await d.latency(relay, 500, 500, 0, sizes.latencyConcurrency);
      // The stream rows' code paths (the server's stream dispatcher and scripts, the raw reader) warm up as the list rows' do.
      if (want("stream")) {
        await d.consumeStream("switchyard", 10, 5000);
        await d.consumeStream("raw", 10, 5000);
      }
    }
    if (uncoalesced) {
      const producer = uncoalesced;
      await interleaved("enqueue serial", [
        ["switchyard serial", () => rec("d.serial.sy")(d.enqueue("switchyard", sizes.serial, 1, 1))],
        ["switchyard serial, coalesceEnqueues off", () => rec("d.serial.sync")(d.enqueue("switchyard", sizes.serial, 1, 1, producer))],
        ["bullmq serial", () => rec("d.serial.bull")(d.enqueue("bullmq", sizes.serial, 1, 1))],
        ["raw ioredis LPUSH serial", () => rec("d.serial.raw")(d.rawEnqueue(sizes.serial, 1, 1))],
        ["grpc-js echo, unary", () => rec("d.echo.unary")(d.echo("unary", sizes.echoCalls, sizes.echoBytes))],
        ["grpc-js echo, stream", () => rec("d.echo.stream")(d.echo("stream", sizes.echoCalls, sizes.echoBytes))],
        ["grpc-js echo, stream, LPUSH each", () => rec("d.echo.push")(d.echo("push", sizes.echoCalls, sizes.echoBytes))],
      ]);
      await interleaved("enqueue 100 in flight", [
        ["switchyard 100 in flight", () => rec("d.inflight.sy")(d.enqueue("switchyard", sizes.inFlight.switchyard, 1, 100))],
        ["bullmq 100 in flight", () => rec("d.inflight.bull")(d.enqueue("bullmq", sizes.inFlight.bullmq, 1, 100))],
      ]);
      await interleaved("enqueue 1000 per call", [
        ["switchyard 1000 per call", () => rec("d.batched.sy")(d.enqueue("switchyard", sizes.batched.switchyard, 1000, 1))],
        ["bullmq addBulk(1000)", () => rec("d.batched.bull")(d.enqueue("bullmq", sizes.batched.bullmq, 1000, 1))],
      ]);
    }
    if (want("consume")) {
      for (const s of sizes.consume) {
        await interleaved(`consume ${s.label}`, [
          ["switchyard reliable", () => rec(`d.rel.${s.key}.sy`)(d.consume("switchyard", "reliable", s.workers, s.c, s.items))],
          ["switchyard simple", () => rec(`d.sim.${s.key}.sy`)(d.consume("switchyard", "simple", s.workers, s.c, s.items))],
          ["bullmq worker", () => rec(`d.${s.key}.bull`)(d.consume("bullmq", "reliable", s.workers, s.c, s.items))],
        ]);
      }
    }
    if (want("latency")) {
      // Here, not only at the start: the paced path needs thousands of items to be optimized, and an idle
      // process's collections can drop that code while other rows run (bench/README, 5 December, afternoon).
      if (options.warmup) {
        for (const system of ["switchyard", "bullmq", "relay", "relay-push"] as const) {
          await d.latency(system, sizes.latencyWarmup.rate, sizes.latencyWarmup.items, 0, sizes.latencyConcurrency);
        }
      }
      for (const l of sizes.latency) {
        const perSlice = Math.ceil(l.items / sizes.latencySlices);
        const latency = (name: string, system: LatencySystem, key: string): [string, () => Promise<number[]>, (pooled: number[]) => void] => [
          name,
          () => d.latencySamples(system, l.rate, perSlice, l.warmup, sizes.latencyConcurrency),
          (pooled) => {
            const s = spread(pooled);
            for (const p of ["p50", "p90", "p99", "max"] as const) rounds.record(`d.lat.${l.key}.${key}.${p}`, s[p]);
          },
        ];
        await rounds.sliced(`latency ${l.rate}/s`, [
          latency("switchyard latency", "switchyard", "sy"),
          latency("bullmq latency", "bullmq", "bull"),
          latency("grpc-js relay latency (the floor)", "relay", "relay"),
          latency("grpc-js relay with an LPUSH per item", "relay-push", "push"),
        ], sizes.latencySlices, { warm: options.warmup });
      }
    }
    if (want("stream")) {
      for (const s of sizes.stream) {
        await interleaved(`stream consume ${s.label}`, [
          ["switchyard stream", () => rec(`d.st.${s.key}.sy`)(d.consumeStream("switchyard", s.c, s.items))],
          ["raw ioredis XREADGROUP/XACK", () => rec(`d.st.${s.key}.raw`)(d.consumeStream("raw", s.c, s.items))],
          ["bullmq worker", () => rec(`d.st.${s.key}.bull`)(d.consume("bullmq", "reliable", 1, s.c, s.items))],
        ]);
      }
      await rounds.interleaved("stream memory", [
        ["switchyard stream memory", async () => {
          const m = await d.streamMemory(sizes.streamMemory.entries, sizes.streamMemory.maxLen);
          rounds.record("d.st.mem.len", m.length);
          rounds.record("d.st.mem.bytes", m.bytes);
        }],
      ]);
    }
    if (want("python")) {
      await interleaved("python worker", [
        ["python worker (switchyard reliable)", () => rec("d.py.sy")(d.python(sizes.python.c, sizes.python.items))],
        ["bullmq worker", () => rec("d.py.bull")(d.consume("bullmq", "reliable", 1, sizes.python.c, sizes.python.items))],
      ]);
    }
  } finally {
    await uncoalesced?.stop();
    await d.stop();
  }
}

/** Targets of issue 13 (part 2), as ratios Switchyard / BullMQ. */
const consumeTargets: Record<string, { reliable: number; simple: number }> = {
  c1: { reliable: 1, simple: 1.5 },
  c10: { reliable: 1.5, simple: 1.5 },
  c100: { reliable: 2, simple: 1.5 },
  "4x25": { reliable: 2, simple: 1.5 },
};

/** The deployed-shape table: shape, Switchyard, BullMQ, ratio, target, verdict. */
export function deployedTable(r: Rounds, sizes: DeployedSizes): string | undefined {
  const rows: string[][] = [];
  const rate = (shape: string, sy: string, bull: string, target?: number, targetText?: string) => {
    if (!r.has(sy)) return;
    const ratio = r.med(sy) / r.med(bull);
    rows.push([shape, fmtRate(r.med(sy)), fmtRate(r.med(bull)), fmtRatio(ratio), targetText ?? (target ? `≥ ${target}×` : "report"), target ? verdict(ratio, target, true, "×") : "—"]);
  };
  rate("enqueue, serial (await each call)", "d.serial.sy", "d.serial.bull", 0.6);
  rate("… the same, client without coalescing (`coalesceEnqueues: false`; diagnostic)", "d.serial.sync", "d.serial.bull");
  if (r.has("d.echo.stream")) {
    const e = r.med("d.echo.stream");
    const u = r.med("d.echo.unary");
    const raw = r.med("d.serial.raw");
    const b = r.med("d.serial.bull");
    // A serial enqueue crosses the gRPC hop and then Redis: at best the echo's round trip plus a bare LPUSH's.
    const bound = 1 / (1 / e + 1 / raw);
    rows.push([
      "… limit of the extra hop: plain grpc-js echo, serial (stream message / unary call); raw ioredis LPUSH, serial; bound = 1 / (1/echo + 1/LPUSH)",
      `echo ${fmtRate(e)} / ${fmtRate(u)}; LPUSH ${fmtRate(raw)}; bound ${fmtRate(bound)}`, fmtRate(b), `bound ${fmtRatio(bound / b)}`, "report", "—",
    ]);
  }
  if (r.has("d.echo.push")) {
    // The same chain measured: a serial enqueue's hop and Redis with nothing of Switchyard's between them.
    const p = r.med("d.echo.push");
    const b = r.med("d.serial.bull");
    rows.push([
      "… the same limit measured: a plain grpc-js server that LPUSHes each stream message (ioredis) before answering it, serial",
      fmtRate(p), fmtRate(b), fmtRatio(p / b), "report", "—",
    ]);
  }
  rate("enqueue, 1 item per call, 100 calls in flight", "d.inflight.sy", "d.inflight.bull");
  rate("enqueue, 1000 items per call (addBulk), one call at a time", "d.batched.sy", "d.batched.bull");
  for (const s of sizes.consume) {
    rate(`reliable (recovery set) lease→ack, ${s.label}`, `d.rel.${s.key}.sy`, `d.${s.key}.bull`, consumeTargets[s.key].reliable);
  }
  for (const s of sizes.consume) {
    rate(`simple lease, ${s.label} (BullMQ as above)`, `d.sim.${s.key}.sy`, `d.${s.key}.bull`, consumeTargets[s.key].simple);
  }
  for (const l of sizes.latency) {
    const m = (sys: string, p: string) => r.med(`d.lat.${l.key}.${sys}.${p}`);
    if (!r.has(`d.lat.${l.key}.sy.p50`)) continue;
    const four = (sys: string) => ["p50", "p90", "p99", "max"].map((p) => fmtMs(m(sys, p)).replace(" ms", "")).join(" / ") + " ms";
    const p50 = m("sy", "p50");
    const p99ratio = m("sy", "p99") / m("bull", "p99");
    const ok = verdict(p50, 1, false, " ms") === "met" && p99ratio <= 1;
    rows.push([
      `enqueue→handler latency at ${l.rate}/s, c = ${sizes.latencyConcurrency}: p50 / p90 / p99 / max`,
      four("sy"), four("bull"), `p50 ${fmtRatio(p50 / m("bull", "p50"))}, p99 ${fmtRatio(p99ratio)}`,
      "p50 ≤ 1 ms, p99 ≤ BullMQ's",
      ok ? "met" : `${p50 <= 1 ? "p50 met" : "p50 missed"}; p99 ${p99ratio <= 1 ? "met" : `missed (${fmtRatio(p99ratio)})`}`,
    ]);
    if (r.has(`d.lat.${l.key}.relay.p50`)) {
      rows.push([
        "… floor: a plain grpc-js relay process in the server's place (producer → relay → worker, each message answered and acked, no Redis); ratio: its p99 / BullMQ's",
        four("relay"), four("bull"), `p99 ${fmtRatio(m("relay", "p99") / m("bull", "p99"))}`, "report", "—",
      ]);
    }
    if (r.has(`d.lat.${l.key}.push.p50`)) {
      rows.push([
        "… the same relay with Redis: it LPUSHes each message (plain ioredis) before it relays and answers it, the round trip an item makes before it is delivered and nothing of Switchyard's; ratio: its p99 / BullMQ's",
        four("push"), four("bull"), `p99 ${fmtRatio(m("push", "p99") / m("bull", "p99"))}`, "report", "—",
      ]);
    }
  }
  if (r.has("d.py.sy")) {
    const node = r.has("d.rel.c10.sy") ? `; the Node worker: ${fmtRate(r.med("d.rel.c10.sy"))}` : "";
    rows.push([`Python worker (grpcio, ack_batch per batch), reliable, c = ${sizes.python.c}${node}`, fmtRate(r.med("d.py.sy")), fmtRate(r.med("d.py.bull")), fmtRatio(r.med("d.py.sy") / r.med("d.py.bull")), "report", "—"]);
  }
  for (const s of sizes.stream) {
    const sy = `d.st.${s.key}.sy`;
    if (!r.has(sy)) continue;
    rate(`stream (consumer group) lease→ack, ${s.label}`, sy, `d.st.${s.key}.bull`, 1.5);
    rows.push([`… raw ioredis XREADGROUP COUNT c / XACK, ${s.label} (Switchyard / raw in the ratio column)`, fmtRate(r.med(`d.st.${s.key}.raw`)), "—", fmtRatio(r.med(sy) / r.med(`d.st.${s.key}.raw`)), "report", "—"]);
  }
  if (r.has("d.st.mem.bytes")) {
    const len = r.med("d.st.mem.len");
    const bytes = r.med("d.st.mem.bytes");
    rows.push([
      `stream memory: ${sizes.streamMemory.entries.toLocaleString("en-US")} entries of ~100 B appended (Enqueue) under MAXLEN ~ ${sizes.streamMemory.maxLen.toLocaleString("en-US")}: XLEN, MEMORY USAGE`,
      `${len.toLocaleString("en-US")} entries, ${(bytes / 1048576).toFixed(1)} MiB (${(bytes / len).toFixed(0)} B/entry)`, "—", "—", "report", "—",
    ]);
  }
  if (rows.length === 0) return undefined;
  return markdownTable(["shape (median of rounds)", "Switchyard", "BullMQ", "ratio", "target", "verdict"], rows);
}
