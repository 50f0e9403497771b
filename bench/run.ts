/**
 * `npm run bench`: Switchyard against BullMQ and raw ioredis on one private
 * Redis, interleaved, 3 rounds; prints one table of medians and writes it to
 * bench/RESULTS.md. See bench/README.md.
 *
 *   node dist-bench/run.js [--rows deployed|in-process|enqueue,consume,latency,python,stream,1,2,5…]
 *                          [--rounds 3] [--scale 1] [--quick] [--out FILE]
 *                          [--server child] [--server-node-args "--cpu-prof --cpu-prof-dir=DIR"]
 *                          [--agent-node-args "--trace-gc-nvp"] (the deployed rows' producers and workers)
 *                          [--only switchyard] [--redis-stats] [--profile-ticks FILE]
 *
 * The deployed-shape rows (deployed-rows.ts: enqueue, consume, latency,
 * python) always run the server as a child process, with every producer and
 * worker in a process of its own; rows 1–9 are the server-in-process
 * diagnostics. `--quick` is for development: the deployed rows, one round, a
 * quarter of the sizes. A full run writes bench/RESULTS.md and the README's
 * tables; a partial run (--rows, --rounds, --scale, --quick, --server or
 * --only given) only prints its tables. With --out FILE either writes FILE
 * alone, so the README's tables keep to bench/RESULTS.md. `--server child` is a diagnostic: rows
 * 1–5 then talk to Switchyard running as `node dist/main.js` in a child process
 * (on the same Redis), so the server's CPU is not shared with the load
 * generator and can be profiled on its own. Rows 8 and 9 always run in-process.
 */
import { cpus, loadavg, totalmem } from "node:os";
import { readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { startBenchRedis, startBenchApp, type BenchApp, type BenchRedis } from "./env.js";
import { SwitchyardClient } from "../dist/client/client.js";
import { loadConfig } from "../dist/config.js";
import { bullEnqueue, bullLeaseAck, rawEnqueue, syEnqueue, syLeaseAck, type Ctx } from "./throughput.js";
import { bullLatency, syLatency } from "./latency.js";
import { freePort, idleStreams, startServer } from "./streams.js";
import { watchdogRecovery } from "./watchdog.js";
import { delayedBurst, startInstances } from "./delayed.js";
import { SchedulerBench } from "./scheduler.js";
import { leftovers, log, median, startCpuProfile } from "./lib.js";
import { Rounds } from "./rounds.js";
import { fmtMs, fmtNum, fmtRate, fmtRatio, verdict } from "./table.js";
import { deployedGroups, deployedSizes, deployedTable, runDeployed, type DeployedGroup } from "./deployed-rows.js";
import { blackholeRss, stuckConsumerRss, type RssRow } from "./hardening.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const QUICK = process.argv.includes("--quick");
const inProcessRows = "1,2,3,4,5,5c,6,7,8,9,10,11,12";
const rowsWanted = new Set(
  (arg("rows") ?? (QUICK ? "deployed" : `deployed,${inProcessRows}`))
    .split(",")
    .map((s) => s.trim())
    .flatMap((s) => (s === "deployed" ? [...deployedGroups] : s === "in-process" ? inProcessRows.split(",") : [s])),
);
const ROUNDS = Number(arg("rounds") ?? (QUICK ? 1 : 3));
const SCALE = Number(arg("scale") ?? (QUICK ? 0.25 : 1));
const SERVER = arg("server") ?? "in-process";
/** Runs only the systems whose label starts with this (e.g. "switchyard"), and skips the warm-up: for profiling. */
const ONLY = arg("only");
/** Prints Redis INFO commandstats and SLOWLOG at the end of the run (stats reset after start-up). */
const REDIS_STATS = process.argv.includes("--redis-stats");
/** Row 9: writes a CPU profile of the measured ticks only (not the set-up) to this file. */
const PROFILE_TICKS = arg("profile-ticks");
const partial = QUICK || ["rows", "rounds", "scale", "server", "only"].some((a) => arg(a) !== undefined);
const outFile = arg("out") ?? (partial ? undefined : join(root, "bench", "RESULTS.md"));
/** The README's tables follow bench/RESULTS.md: only a full run without --out writes them. */
const updatesReadme = !partial && arg("out") === undefined;
const want = (...ids: string[]) => ids.some((id) => rowsWanted.has(id));
const n = (x: number) => Math.max(1000, Math.round((x * SCALE) / 1000) * 1000);

/** Sizes: chosen so the whole run stays well under 10 minutes on 2 cores. */
const SIZES = {
  /** BullMQ's addBulk at ~25,000/s takes 2 s for these; Switchyard and the raw LPUSH take 50–150 ms, too short to be steady. */
  enqueueBatched: n(50_000),
  /** …so they enqueue this many instead: about half a second. */
  enqueueBatchedFast: n(300_000),
  enqueueInFlightBatched: 4,
  enqueueSingle: n(20_000),
  singleInFlight: 100,
  lease: { items: n(50_000), streams: 10, credit: 100 },
  bullConcurrency: 100,
  latency: { ratePerSec: 500, items: Math.round(2500 * SCALE), warmup: 250, concurrency: 10 },
  /** Row 5c, a diagnostic: the same with credit / concurrency 1 (a worker that is busy until its ack lands). */
  latency1: { ratePerSec: 500, items: Math.round(1500 * SCALE), warmup: 250, concurrency: 1 },
  streams: { queues: 100, streamsPerQueue: Math.round(100 * SCALE) },
  watchdog: { claims: n(100_000), streams: 10 },
  scheduler: { jobs: Math.round(10_000 * SCALE), due: Math.round(1_000 * SCALE), periodSec: 5 },
  delayed: { items: n(10_000), leadMs: 3000 },
  /** Row 11: the blackhole's length (60 s at full scale) under 25 Enqueue calls/s of 100 × 1 KB. */
  blackhole: { seconds: Math.max(10, Math.round(60 * SCALE)), callsPerSec: 25, itemsPerCall: 100, itemBytes: 1000 },
};

/** Rows 10 and 11: one run each (a fault against a stated limit, not a median of rounds). */
const hardening = new Map<"10" | "11", RssRow>();

const DEPLOYED = deployedSizes(SCALE);

const rounds = new Rounds(ROUNDS, ONLY);
const samples = rounds.samples;
const record = (metric: string, value: number) => rounds.record(metric, value);
const med = (metric: string) => rounds.med(metric);
const interleaved = (row: string, systems: [string, () => Promise<void>][]) => rounds.interleaved(row, systems);

const loadAtStart = loadavg();
/** Read once, before the run writes RESULTS.md and the README (which would make it "-dirty"). */
let measured = "unknown";
const fmtLoad = (l: number[]) => l.map((x) => x.toFixed(2)).join(" / ");

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    for (const p of leftovers) p.kill("SIGKILL");
    process.exit(130);
  });
}

const wantInProcess = () => inProcessRows.split(",").some((id) => rowsWanted.has(id));

async function main(): Promise<void> {
  const started = Date.now();
  measured = revision();
  const redis = await startBenchRedis(SERVER === "child" ? await freePort() : 0);
  leftovers.add(redis.server.process);
  const info = (await redis.plain.info("server")) as string;
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? "?";
  log(`redis ${redisVersion} on ${redis.socketPath}`);
  try {
    if (deployedGroups.some((g) => rowsWanted.has(g))) {
      const python = rowsWanted.has("python") ? pythonStubs() : undefined;
      try {
        const want = (g: DeployedGroup) => rowsWanted.has(g) && (g !== "python" || python !== undefined);
        const serverNodeArgs = (arg("server-node-args") ?? "").split(" ").filter(Boolean);
        const agentNodeArgs = (arg("agent-node-args") ?? "").split(" ").filter(Boolean);
        await runDeployed(rounds, redis, DEPLOYED, want, { serverNodeArgs, agentNodeArgs, pythonPath: python, warmup: !ONLY });
      } finally {
        if (python) rmSync(python, { recursive: true, force: true });
      }
    }
    if (wantInProcess()) await runInProcess(redis);
  } finally {
    await redis.stop();
  }
  const elapsed = (Date.now() - started) / 1000;
  const deployed = deployedTable(rounds, DEPLOYED);
  const inProcess = lines().length > 0 ? renderTable() : undefined;
  if (deployed) process.stdout.write(`\nDeployed shapes (server, producers and workers in their own processes):\n\n${deployed}\n`);
  if (inProcess) process.stdout.write(`\nServer in-process diagnostics:\n\n${inProcess}\n`);
  log(`finished in ${elapsed.toFixed(0)} s`);
  if (outFile) {
    writeFileSync(outFile, renderResults(deployed, inProcess, elapsed, redisVersion));
    log(`wrote ${outFile}`);
  }
  if (updatesReadme) {
    updateReadme(deployed, inProcess);
    log("updated the README's benchmark tables");
  }
}

/** Generates the Python stubs into a temp folder; undefined (and the Python row skipped) when python3 lacks grpc_tools. */
function pythonStubs(): string | undefined {
  const dir = mkdtempSync(join(tmpdir(), "sy-bench-py-"));
  try {
    execFileSync("sh", [join(root, "examples/python/generate.sh"), dir], { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, PYTHON: "/usr/bin/python3" } });
    return dir;
  } catch (err) {
    log(`skipping the Python worker row: ${String((err as { stderr?: Buffer }).stderr ?? err).trim()}`);
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
}

async function runInProcess(redis: BenchRedis): Promise<void> {
  let sy: BenchApp;
  if (SERVER === "child") {
    // unix:// when this build's config reads it, else loopback TCP.
    const unix = loadConfig({ SWITCHYARD_REDIS_URL: `unix://${redis.socketPath}` }).redis.kind === "socket";
    const url = unix ? `unix://${redis.socketPath}` : `redis://127.0.0.1:${redis.port}`;
    const nodeArgs = (arg("server-node-args") ?? "").split(" ").filter(Boolean);
    const { child, address } = await startServer(url, nodeArgs);
    leftovers.add(child);
    const client = new SwitchyardClient(address);
    log(`switchyard child pid ${child.pid} on ${address}, redis ${url}`);
    sy = {
      app: { address } as BenchApp["app"],
      client,
      async stop() {
        client.close();
        child.kill("SIGTERM");
        await new Promise((ok) => (child.exitCode !== null ? ok(undefined) : child.once("exit", ok)));
      },
    };
  } else {
    sy = await startBenchApp(redis.socketPath);
  }
  const ctx: Ctx = { redis, client: sy.client };
  // Row 2r: the same client without enqueue coalescing, so every enqueue() is its own request on the stream;
  // rows 1u and 2u: unary Enqueue RPCs instead of EnqueueStream messages (2u: one RPC per enqueue()).
  const perRequest = new SwitchyardClient(sy.app.address, { coalesceEnqueues: false });
  const unary = new SwitchyardClient(sy.app.address, { enqueueStream: false });
  const perRpc = new SwitchyardClient(sy.app.address, { coalesceEnqueues: false, enqueueStream: false });
  log(`switchyard on ${sy.app.address}`);
  if (REDIS_STATS) {
    await redis.plain.config("RESETSTAT");
    await redis.plain.config("SET", "slowlog-log-slower-than", "1000");
    await redis.plain.slowlog("RESET");
  }
  try {
    // Warm-up (not recorded): JIT, connections, script loading for every system.
    if (want("1", "2", "3", "4", "6") && !ONLY) {
      await syEnqueue(ctx, 5000, 1000, 4);
      await bullEnqueue(ctx, 5000, 1000, 4);
      await rawEnqueue(ctx, 5000, 1000, 4);
      await syLeaseAck(ctx, "reliable", { items: 5000, streams: 10, credit: 100 });
      await bullLeaseAck(ctx, 5000, 100);
      log("warm-up done");
    }
    if (want("1", "6")) {
      const { enqueueBatched: s, enqueueBatchedFast: fast, enqueueInFlightBatched: k } = SIZES;
      await interleaved("1/6", [
        ["switchyard Enqueue x1000", async () => record("1.sy", await syEnqueue(ctx, fast, 1000, k))],
        ["switchyard Enqueue x1000, unary RPCs", async () => record("1u.sy", await syEnqueue(ctx, fast, 1000, k, unary))],
        ["bullmq addBulk(1000)", async () => record("1.bull", await bullEnqueue(ctx, s, 1000, k))],
        ["raw LPUSH x1000", async () => record("1.raw", await rawEnqueue(ctx, fast, 1000, k))],
      ]);
    }
    if (want("2")) {
      const s = SIZES.enqueueSingle;
      const k = SIZES.singleInFlight;
      await interleaved("2", [
        ["switchyard Enqueue x1", async () => record("2.sy", await syEnqueue(ctx, s, 1, k))],
        ["switchyard Enqueue x1, one request per call", async () => record("2r.sy", await syEnqueue(ctx, s, 1, k, perRequest))],
        ["switchyard Enqueue x1, one unary RPC per call", async () => record("2u.sy", await syEnqueue(ctx, s, 1, k, perRpc))],
        ["bullmq add", async () => record("2.bull", await bullEnqueue(ctx, s, 1, k))],
        ["raw LPUSH x1", async () => record("2.raw", await rawEnqueue(ctx, s, 1, k))],
      ]);
    }
    if (want("3")) {
      await interleaved("3", [
        ["switchyard reliable lease+ack", async () => record("3.sy", await syLeaseAck(ctx, "reliable", SIZES.lease))],
        ["bullmq worker", async () => record("3.bull", await bullLeaseAck(ctx, SIZES.lease.items, SIZES.bullConcurrency))],
      ]);
    }
    if (want("4")) {
      await interleaved("4", [
        ["switchyard simple lease", async () => record("4.sy", await syLeaseAck(ctx, "simple", SIZES.lease))],
        ["bullmq worker", async () => record("4.bull", await bullLeaseAck(ctx, SIZES.lease.items, SIZES.bullConcurrency))],
      ]);
    }
    if (want("5")) {
      await interleaved("5", [
        [
          "switchyard latency",
          async () => {
            const r = await syLatency(ctx, SIZES.latency);
            record("5.sy.p50", r.p50);
            record("5.sy.p99", r.p99);
          },
        ],
        [
          "bullmq latency",
          async () => {
            const r = await bullLatency(ctx, SIZES.latency);
            record("5.bull.p50", r.p50);
            record("5.bull.p99", r.p99);
          },
        ],
      ]);
    }
    if (want("5c")) {
      await interleaved("5c", [
        [
          "switchyard latency, credit 1",
          async () => {
            const r = await syLatency(ctx, SIZES.latency1);
            record("5c.sy.p50", r.p50);
            record("5c.sy.p99", r.p99);
          },
        ],
        [
          "bullmq latency, concurrency 1",
          async () => {
            const r = await bullLatency(ctx, SIZES.latency1);
            record("5c.bull.p50", r.p50);
            record("5c.bull.p99", r.p99);
          },
        ],
      ]);
    }
    if (want("7")) {
      await interleaved("7", [
        [
          "switchyard idle streams (child server)",
          async () => {
            const r = await idleStreams(SIZES.streams);
            record("7.conns", r.connections);
            record("7.baseConns", r.baseConnections);
            record("7.kbPerStream", r.rssKbPerStream);
            record("7.rssBefore", r.rssBeforeMb);
            record("7.rssAfter", r.rssAfterMb);
          },
        ],
      ]);
    }
    if (want("8")) {
      await interleaved("8", [
        [
          "switchyard watchdog pass",
          async () => {
            const r = await watchdogRecovery(ctx, { ...SIZES.watchdog, slowlog: REDIS_STATS });
            record("8.rate", r.itemsPerSec);
            record("8.p99", r.othersP99);
            record("8.p50", r.othersP50);
            record("8.baseP99", r.baselineP99);
            record("8.passMs", r.passMs);
          },
        ],
      ]);
    }
    if (want("9")) {
      const bench = new SchedulerBench(ctx, SIZES.scheduler);
      try {
        await bench.setup();
        record("9.setupMs", bench.setupMs);
        record("9.apiCreateSec", bench.apiSec);
        await bench.nextTick(); // warm-up tick, not recorded
        const stopProfile = PROFILE_TICKS ? await startCpuProfile() : undefined;
        await interleaved("9", [
          [
            "switchyard scheduler tick",
            async () => {
              const r = await bench.nextTick();
              record("9.p50", r.p50);
              record("9.p99", r.p99);
              record("9.max", r.max);
              record("9.runs", r.runs);
              record("9.distinct", r.distinctJobs);
            },
          ],
        ]);
        await stopProfile?.(PROFILE_TICKS!);
      } finally {
        await bench.teardown();
      }
    }
    // Each on a child server with its own redis-server, once: the fault itself lasts up to a minute.
    if (want("10")) {
      const t0 = Date.now();
      hardening.set("10", await stuckConsumerRss());
      log(`row 10: switchyard under a worker that never reads done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
    if (want("11")) {
      const t0 = Date.now();
      hardening.set("11", await blackholeRss(SIZES.blackhole));
      log(`row 11: switchyard under a ${SIZES.blackhole.seconds} s blackhole done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
    if (want("12")) {
      const instances = await startInstances(redis, 3);
      try {
        // A burst first, not recorded, as every other shape has its warm-up: the first burst
        // runs the movers' and enqueue's code cold in three fresh processes, and the raw consumer's in its own.
        // Its items must each move once too: the row says FAILED if they did not.
        if (!ONLY && !(await delayedBurst(redis, instances, SIZES.delayed)).movedOnce) record("12.once", 0);
        await interleaved("12", [
          [
            "switchyard delayed items due at once, 3 server processes",
            async () => {
              const r = await delayedBurst(redis, instances, SIZES.delayed);
              record("12.p50", r.p50);
              record("12.p99", r.p99);
              record("12.max", r.max);
              record("12.rate", r.moverPerSec);
              record("12.once", r.movedOnce ? 1 : 0);
              record("12.scriptUs", r.scriptUsPerCall);
              record("12.lpushBeforeP99", r.lpushBefore.p99);
              record("12.lpushDuringP99", r.lpushDuring.p99);
              record("12.lpushDuringP50", r.lpushDuring.p50);
            },
          ],
        ]);
      } finally {
        await instances.stop();
      }
    }
  } finally {
    if (REDIS_STATS) await printRedisStats(redis.plain).catch((err: unknown) => log(`redis stats: ${String(err)}`));
    for (const c of [perRequest, unary, perRpc]) c.close();
    await sy.stop();
  }
}

async function printRedisStats(plain: BenchRedis["plain"]): Promise<void> {
  const stats = (await plain.info("commandstats")) as string;
  const rows = [...stats.matchAll(/cmdstat_(\S+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/g)]
    .map((m) => ({ cmd: m[1], calls: Number(m[2]), usec: Number(m[3]), per: Number(m[4]) }))
    .sort((a, b) => b.usec - a.usec)
    .slice(0, 15);
  process.stderr.write("\nRedis INFO commandstats (top by total time):\n");
  for (const r of rows) process.stderr.write(`  ${r.cmd.padEnd(14)} calls ${String(r.calls).padStart(9)}  total ${(r.usec / 1000).toFixed(0).padStart(7)} ms  per call ${r.per.toFixed(1)} µs\n`);
  const slow = (await plain.slowlog("GET", 20)) as [number, number, number, (string | Buffer)[]][];
  process.stderr.write(`Redis SLOWLOG (≥ 1 ms), ${slow.length} newest:\n`);
  for (const [, , us, args] of slow) process.stderr.write(`  ${(us / 1000).toFixed(1)} ms  ${args.slice(0, 4).map((a) => String(a).slice(0, 24).replace(/\s+/g, " ")).join(" ")}\n`);
}

// ------------------------------------------------------------------ output

interface Line {
  row: string;
  what: string;
  sy: string;
  bull: string;
  raw: string;
  ratio: string;
  target: string;
  verdict: string;
}

function lines(): Line[] {
  const out: Line[] = [];
  const throughputRow = (row: string, what: string, key: string, peer: "bull" | "raw", goal: number, targetText: string) => {
    const sy = med(`${key}.sy`);
    const bull = med(`${key}.bull`);
    const raw = med(`${key}.raw`);
    const ratio = sy / (peer === "bull" ? bull : raw);
    out.push({ row, what, sy: fmtRate(sy), bull: fmtRate(bull), raw: fmtRate(raw), ratio: fmtRatio(ratio), target: targetText, verdict: verdict(ratio, goal, true, "×") });
  };
  /** A variant of a row, reported against BullMQ's figure for the row. */
  const variantRow = (row: string, what: string, key: string, bullKey: string) => {
    const sy = med(`${key}.sy`);
    const bull = med(`${bullKey}.bull`);
    out.push({ row, what, sy: fmtRate(sy), bull: fmtRate(bull), raw: "–", ratio: fmtRatio(sy / bull), target: "report", verdict: "reported" });
  };
  if (samples.has("1.sy")) {
    throughputRow("1", "enqueue, 1000 items per call, 4 calls in flight (items/s; requests on the client's EnqueueStream)", "1", "bull", 5, "≥ 5× BullMQ addBulk(1000)");
    variantRow("1u", "the same as unary Enqueue RPCs (enqueueStream: false)", "1u", "1");
  }
  if (samples.has("2.sy")) {
    throughputRow("2", "enqueue, 1 item per enqueue() call, 100 calls in flight (items/s; the client coalesces a turn's calls into one request)", "2", "bull", 1, "≥ 1× BullMQ add");
    variantRow("2r", "the same with coalesceEnqueues: false: one EnqueueStream request per item", "2r", "2");
    variantRow("2u", "the same with coalesceEnqueues and enqueueStream false: one unary Enqueue RPC per item", "2u", "2");
  }
  if (samples.has("3.sy")) {
    throughputRow("3", "reliable lease→ack, recovery set, 10 streams × credit 100 vs BullMQ Worker concurrency 100 (items/s)", "3", "bull", 2, "≥ 2×");
  }
  if (samples.has("4.sy")) throughputRow("4", "simple-queue lease, same shape (items/s)", "4", "bull", 3, "≥ 3×");
  if (samples.has("5.sy.p50")) {
    const p50 = med("5.sy.p50");
    const p99 = med("5.sy.p99");
    const b50 = med("5.bull.p50");
    const b99 = med("5.bull.p99");
    out.push({ row: "5a", what: "enqueue→delivery latency at 500 items/s, p50", sy: fmtMs(p50), bull: fmtMs(b50), raw: "—", ratio: fmtRatio(p50 / b50), target: "p50 ≤ 1 ms", verdict: verdict(p50, 1, false, " ms") });
    out.push({ row: "5b", what: "enqueue→delivery latency at 500 items/s, p99", sy: fmtMs(p99), bull: fmtMs(b99), raw: "—", ratio: fmtRatio(p99 / b99), target: "p99 ≤ BullMQ's p99 (ratio ≤ 1)", verdict: verdict(p99 / b99, 1, false, "×") });
  }
  if (samples.has("5c.sy.p50")) {
    const p50 = med("5c.sy.p50");
    const p99 = med("5c.sy.p99");
    const b50 = med("5c.bull.p50");
    const b99 = med("5c.bull.p99");
    out.push({ row: "5c", what: "diagnostic: the same with credit / concurrency 1, p50 · p99", sy: `${fmtMs(p50)} · ${fmtMs(p99)}`, bull: `${fmtMs(b50)} · ${fmtMs(b99)}`, raw: "—", ratio: `${fmtRatio(p50 / b50)} · ${fmtRatio(p99 / b99)}`, target: "(no target)", verdict: "—" });
  }
  if (samples.has("1.sy") && samples.has("1.raw")) {
    const ratio = med("1.sy") / med("1.raw");
    out.push({ row: "6", what: "enqueue 1000/call vs raw ioredis variadic LPUSH of 1000 (items/s)", sy: fmtRate(med("1.sy")), bull: "—", raw: fmtRate(med("1.raw")), ratio: fmtRatio(ratio), target: "report; aim ≥ 0.4", verdict: verdict(ratio, 0.4, true, "×") });
  }
  if (samples.has("7.conns")) {
    const queues = SIZES.streams.queues;
    const conns = med("7.conns");
    const base = med("7.baseConns");
    const perQueue = (conns - base) / queues;
    const total = queues * SIZES.streams.streamsPerQueue;
    out.push({ row: "7a", what: `${total.toLocaleString("en-US")} idle lease streams over ${queues} queues: server's Redis connections`, sy: `${fmtNum(conns)} (${fmtNum(base)} with no stream; ${fmtNum(perQueue, 2)} per queue)`, bull: "—", raw: "—", ratio: "—", target: "≤ 2 per queue with waiters + a constant", verdict: verdict(perQueue, 2, false, " per queue") });
    const kb = med("7.kbPerStream");
    out.push({ row: "7b", what: "… server RSS per stream", sy: `${fmtNum(kb, 1)} KB (RSS ${fmtNum(med("7.rssBefore"))} → ${fmtNum(med("7.rssAfter"))} MB)`, bull: "—", raw: "—", ratio: "—", target: "≤ 20 KB per stream", verdict: verdict(kb, 20, false, " KB") });
  }
  if (samples.has("8.rate")) {
    out.push({ row: "8a", what: `watchdog recovering ${SIZES.watchdog.claims.toLocaleString("en-US")} stale claims (items/s)`, sy: `${fmtRate(med("8.rate"))} (pass ${fmtNum(med("8.passMs") / 1000, 2)} s)`, bull: "—", raw: "—", ratio: "—", target: "≥ 50,000/s", verdict: verdict(med("8.rate"), 50_000, true, "/s") });
    out.push({ row: "8b", what: "… another client's PING/GET latency meanwhile, p99", sy: `${fmtMs(med("8.p99"))} (p50 ${fmtMs(med("8.p50"))}; idle p99 ${fmtMs(med("8.baseP99"))})`, bull: "—", raw: "—", ratio: "—", target: "p99 ≤ 10 ms", verdict: verdict(med("8.p99"), 10, false, " ms") });
  }
  if (samples.has("9.p50")) {
    const { jobs, due } = SIZES.scheduler;
    const runs = samples.get("9.runs")!;
    const distinct = samples.get("9.distinct")!;
    const once = runs.every((r, i) => r === due && distinct[i] === due);
    out.push({ row: "9a", what: `scheduler, ${jobs.toLocaleString("en-US")} mounted jobs, ${due.toLocaleString("en-US")} due in one second: tick lateness p50`, sy: fmtMs(med("9.p50")), bull: "—", raw: "—", ratio: "—", target: "(report)", verdict: "—" });
    out.push({ row: "9b", what: "… tick lateness p99 (and every due job ran exactly once per tick)", sy: `${fmtMs(med("9.p99"))} (max ${fmtMs(med("9.max"))}; runs per tick ${runs.join(", ")})`, bull: "—", raw: "—", ratio: "—", target: "p99 ≤ 50 ms; each due job runs once", verdict: once ? verdict(med("9.p99"), 50, false, " ms") : `FAILED: runs per tick ${runs.join(",")}, distinct ${distinct.join(",")}` });
  }
  const rssRow = (row: "10" | "11", what: string) => {
    const r = hardening.get(row);
    if (!r) return;
    const growth = r.peakMb - r.baseMb;
    out.push({
      row, what, sy: `peak ${fmtNum(r.peakMb)} MB from ${fmtNum(r.baseMb)} MB (+${fmtNum(growth)} MB); ${r.detail}`,
      bull: "—", raw: "—", ratio: "—", target: `growth ≤ +${fmtNum(r.limitMb)} MB: ${r.limit}`, verdict: verdict(growth, Math.round(r.limitMb), false, " MB"),
    });
  };
  rssRow("10", "one run: server RSS under a worker that never reads (credit 2,000 on 2,000 items of 100 KB, plain HTTP/2, window shut)");
  rssRow("11", `one run: server RSS under a ${SIZES.blackhole.seconds} s blackhole of its Redis link at a fixed offered load (25 unary Enqueue calls/s of 100 × 1 KB, open loop); "from": its highest RSS in the 10 s before, under the same load`);
  if (samples.has("12.p99")) {
    const items = SIZES.delayed.items.toLocaleString("en-US");
    const once = samples.get("12.once")!.every((x) => x === 1);
    out.push({ row: "12a", what: `${items} delayed items due at once across 3 server processes: lateness p99 (each moved exactly once)`, sy: `${fmtMs(med("12.p99"))} (p50 ${fmtMs(med("12.p50"))}, max ${fmtMs(med("12.max"))})`, bull: "—", raw: "—", ratio: "—", target: "p99 ≤ 50 ms; each item once", verdict: once ? verdict(med("12.p99"), 50, false, " ms") : "FAILED: an item was moved twice or not at all" });
    out.push({ row: "12b", what: "… movers' rate (items / (last moved − due))", sy: `${fmtRate(med("12.rate"))} (promote.lua ${fmtNum(med("12.scriptUs"))} µs per call)`, bull: "—", raw: "—", ratio: "—", target: "≥ 50,000/s", verdict: verdict(med("12.rate"), 50_000, true, "/s") });
    out.push({ row: "12c", what: "… a raw LPUSH producer (own process) meanwhile, p99", sy: `${fmtMs(med("12.lpushDuringP99"))} (p50 ${fmtMs(med("12.lpushDuringP50"))}; the second before: p99 ${fmtMs(med("12.lpushBeforeP99"))})`, bull: "—", raw: "—", ratio: "—", target: "(report)", verdict: "—" });
  }
  return out;
}

function renderTable(): string {
  const head = "| row | what (median of rounds) | Switchyard | BullMQ | raw ioredis | Switchyard / peer | target | verdict |";
  const sep = "|---|---|---|---|---|---|---|---|";
  const body = lines().map((l) => `| ${l.row} | ${l.what} | ${l.sy} | ${l.bull} | ${l.raw} | ${l.ratio} | ${l.target} | ${l.verdict} |`);
  return [head, sep, ...body].join("\n");
}

/** The commit measured, with "-dirty" when the work tree had uncommitted changes. */
function revision(): string {
  try {
    return execFileSync("git", ["describe", "--always", "--dirty"], { cwd: root, encoding: "utf8" }).trim();
  } catch {
    return "unknown";
  }
}

function version(pkg: string): string {
  try {
    return (JSON.parse(readFileSync(join(root, "node_modules", pkg, "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return "?";
  }
}

/** The load average now, with a word on what it means on 2 cores. */
const loadNote = () => `${fmtLoad(loadAtStart)} at the start; ${fmtLoad(loadavg())} at the end`;

function renderResults(deployed: string | undefined, inProcess: string | undefined, elapsedSec: number, redisVersion: string): string {
  const cpu = cpus();
  const fmt = (x: number) => (Math.abs(x) >= 100 ? Math.round(x).toString() : x.toFixed(2));
  const perRound = [...samples.entries()].map(([k, v]) => `| ${k} | ${v.map(fmt).join(" · ")} | ${fmt(median(v))} |`).join("\n");
  const D = DEPLOYED;
  return `# Switchyard benchmark results

Written by \`npm run bench\` on ${new Date().toISOString()} (took ${elapsedSec.toFixed(0)} s).
Every number is the median of ${ROUNDS} rounds; within a round Switchyard and its peers run one
after the other on the same Redis, in an order that rotates from round to round (the latency rows
take turns in slices within a round: see Set-up).
${deployed ? `
## Deployed shapes

The server, every producer and every worker in a process of its own (see Set-up). Ratios are
Switchyard / BullMQ: higher is better for throughput, lower is better for latency. Targets are
issue 13's.

${deployed}
` : ""}${inProcess ? `
## Server in-process diagnostics

Switchyard's server inside the load generator's process (rows 1–6), or alone (7–11): shapes that
hide the per-item round trips users pay, kept to compare with earlier runs.

${inProcess}

Ratios are Switchyard / peer: higher is better for throughput (rows 1–4, 6), lower is better for
latency (row 5). Row 6's peer is the raw ioredis client; rows 1–2 show it for reference.
` : ""}
## Machine and versions

- CPU: ${cpu[0]?.model ?? "?"}, ${cpu.length} cores (shared, noisy); memory ${(totalmem() / 2 ** 30).toFixed(1)} GiB
- Load average (1 / 5 / 15 min): ${loadNote()}. Anything above ~1 means other work shared the 2
  cores with this run, and the numbers are lower and noisier for it.
- Switchyard at \`${measured}\` (built from the work tree by \`npm run build\`)
- Node ${process.version}; redis-server ${redisVersion}; bullmq ${version("bullmq")}; ioredis ${version("ioredis")}; @grpc/grpc-js ${version("@grpc/grpc-js")}; @bufbuild/protobuf ${version("@bufbuild/protobuf")}; Python grpcio from Debian (\`/usr/bin/python3\`)
- Command: \`npm run bench\` (= \`npm run build && tsc -p bench/tsconfig.json && node dist-bench/run.js\`); this run: \`${["node", ...process.argv.slice(1).map((a) => a.replace(root + "/", ""))].join(" ")}\`

## Set-up

- One private \`redis-server\` (\`startEmbeddedRedis\`, append-only off, no RDB saves) on a unix socket;
  Switchyard's server, BullMQ and the raw client all reach it through that socket.
- Payloads are JSON objects of about 100 bytes (\`{"seq":…,"t":…,"pad":"x…"}\`); handlers parse them
  (BullMQ parses job data itself). BullMQ jobs are added with \`removeOnComplete/removeOnFail: true\`
  (Switchyard's ack deletes the item too).
${deployed ? `- Deployed shapes: Switchyard's server is a child process (\`node dist/main.js\`, log level warn); each
  producer and worker is a process of its own (\`bench/agent.ts\`, forked and driven over IPC), with
  the project's client and \`runWorker\`, or BullMQ's \`Queue\` and \`Worker\`; worker and producer processes
  live through the whole run (a warm-up of every system runs first, not recorded, in each shape
  measured: serial and 100-in-flight enqueue, consume, and paced single items for the latency rows, which
  get another ${D.latencyWarmup.items.toLocaleString("en-US")} per system at ${D.latencyWarmup.rate.toLocaleString("en-US")}/s right before them).
  - Enqueue: one producer process; serial = await each call of one item (${D.serial.toLocaleString("en-US")} items);
    100 calls of one item in flight (Switchyard ${D.inFlight.switchyard.toLocaleString("en-US")}, BullMQ ${D.inFlight.bullmq.toLocaleString("en-US")});
    calls of 1000 items, one at a time (Switchyard ${D.batched.switchyard.toLocaleString("en-US")}, BullMQ \`addBulk\`
    ${D.batched.bullmq.toLocaleString("en-US")}): each side timed for half a second or more. Reliable queues without a recovery set. Timed in the producer.
    Beside serial enqueue, a plain ioredis client in its own process LPUSHes the same items one at a time.
  - Consume: a queue prefilled (not timed) with ${D.consume.map((s) => `${s.items.toLocaleString("en-US")} (${s.label})`).join(", ")}
    items; the workers start together and the clock stops when the last item is done: Switchyard
    reliable (recovery set, min_idle 60 s) when the processing list is empty after the last handler
    ran; simple when the last handler ran; BullMQ at the last \`completed\` event. Workers report their
    count every 5 ms over IPC; the parent polls the processing list every 1 ms after the last one.
    \`runWorker({concurrency: c})\` runs at most c handlers at once, as BullMQ's Worker does; it also keeps
    its default prefetch (deliveries ready beyond the running handlers: what
    they get through in 5 ms at their average run time, at most 4c and at least 512; given back uncounted
    on stop): these handlers return at once, so its stream's credit is c + max(512, 4c); BullMQ's Worker
    fetches no more than c (it takes the next job in the call that completes one).
  - Latency: a producer process paced open loop at ${D.latency.map((l) => `${l.rate}/s (${l.items.toLocaleString("en-US")} items per system and round)`).join(" and ")},
    one worker process with concurrency ${D.latencyConcurrency}, reliable queue with a recovery set; each
    payload carries its send time on CLOCK_MONOTONIC (one clock for all processes), read as the handler starts.
    In a round the four systems (Switchyard, BullMQ, the relay, the relay with Redis) take turns in ${D.latencySlices} slices
    each, of ${D.latency.map((l) => `${Math.ceil(l.items / D.latencySlices).toLocaleString("en-US")} items at ${l.rate}/s (after ${l.warmup} unrecorded)`).join(" and ")}, in orders
    that each system runs once in each place of a round and once right after each other system
    (a balanced Latin square), so the host's slow spells fall on all of them alike; a round's
    percentiles are over its slices' items pooled.
  - Python: \`bench/python-worker.py\` (grpcio, one Lease stream, credit ${D.python.c}, one \`ack_batch\` per batch
    received) on ${D.python.items.toLocaleString("en-US")} prefilled items, against a BullMQ Worker of concurrency ${D.python.c}.
  - Echo: a plain grpc-js server and client (\`bench/echo.ts\`) in two processes, ${D.echoCalls.toLocaleString("en-US")} serial
    round trips of ${D.echoBytes} bytes, as unary calls and as messages on one bidi stream (Switchyard's
    client sends enqueue() calls as messages on one EnqueueStream).
` : ""}${inProcess ? `- In-process diagnostics: Switchyard runs in-process (\`startApp\`, log level warn, gRPC on 127.0.0.1); the
  load generator is the project's own client (\`SwitchyardClient\`, \`runWorker\`) over real gRPC on
  loopback, in the same process; BullMQ and the raw client run in the same process too. Rows 1, 2, 3,
  5 and 8 use RELIABLE queues (3, 5 and 8 with a recovery set), row 4 a SIMPLE one.
  Sizes per round: rows 1/6 ${SIZES.enqueueBatchedFast.toLocaleString("en-US")} items for Switchyard and LPUSH, ${SIZES.enqueueBatched.toLocaleString("en-US")} for addBulk (each ${SIZES.enqueueInFlightBatched} calls of 1000 in flight; addBulk takes seconds for what the others do in a tenth of one);
  row 2 ${SIZES.enqueueSingle.toLocaleString("en-US")} items (${SIZES.singleInFlight} calls in flight); rows 3–4 ${SIZES.lease.items.toLocaleString("en-US")} items prefilled (not timed),
  timed from starting the workers until the last item is settled in Redis (Switchyard reliable: processing
  list empty; simple: last item handed to a handler; BullMQ: last \`completed\` event); row 5
  ${SIZES.latency.items.toLocaleString("en-US")} items at ${SIZES.latency.ratePerSec}/s (open loop) after ${SIZES.latency.warmup} warm-up items, one worker with credit / concurrency
  ${SIZES.latency.concurrency} on both sides (so it is waiting when an item arrives), latency from just before the enqueue/add call
  to the handler's start (5c: the same with ${SIZES.latency1.items.toLocaleString("en-US")} items and credit / concurrency 1); row 7 ${SIZES.streams.queues} queues × ${SIZES.streams.streamsPerQueue} streams
  (credit 1, one client connection per queue) on a child \`node dist/main.js\` with its own Redis, RSS from
  /proc before (queues declared, no stream) and after all streams opened; row 8 ${SIZES.watchdog.claims.toLocaleString("en-US")} items leased
  through ${SIZES.watchdog.streams} real streams on a dedicated instance (periodic watchdog off), one \`watchdog.pass()\` timed once
  min_idle (1 s) has passed on the real clock, while another connection sends PING/GET back to back;
  row 9 ${SIZES.scheduler.jobs.toLocaleString("en-US")} jobs on a dedicated instance (${SIZES.scheduler.due.toLocaleString("en-US")} every ${SIZES.scheduler.periodSec} s, created and resumed through the API; the
  rest daily, 12 h away, written straight into the job hash and mounted by \`scheduler.resync()\`, because
  CreateJob currently reads every job on each call; default execute policy SINGLETON); a no-op handler
  records the scheduler clock at each call; lateness = that time − the tick; one warm-up tick, then
  ${ROUNDS} ticks. A warm-up (5,000 items through each system) runs first and is not recorded.
  Rows 10 and 11 (one run each, bench/hardening.ts): a child \`node dist/main.js\` with its own redis-server, RSS from /proc
  every 100 ms: 10 one Lease stream of credit 2,000 that never reads, on 2,000 items of 100 KB pushed straight into Redis;
  11 the Redis link through a TCP proxy that stops carrying anything for ${SIZES.blackhole.seconds} s, 10 s into the load.
` : ""}
## Every round

| metric | rounds | median |
|---|---|---|
${perRound}
`;
}

const README_BEGIN = "<!-- bench:tables:begin (written by npm run bench) -->";
const README_END = "<!-- bench:tables:end -->";

/** Rewrites the README's benchmark tables (between the markers) with this run's. */
function updateReadme(deployed: string | undefined, inProcess: string | undefined): void {
  const path = join(root, "README.md");
  const text = readFileSync(path, "utf8");
  const from = text.indexOf(README_BEGIN);
  const to = text.indexOf(README_END);
  if (from < 0 || to < from) {
    log(`README.md has no ${README_BEGIN} … ${README_END} block; not updated`);
    return;
  }
  const when = new Date().toISOString().slice(0, 16).replace("T", " ");
  const block = [
    README_BEGIN,
    `Run of ${when} UTC at \`${measured}\`, load average ${loadNote()}, medians of ${ROUNDS} rounds.`,
    "",
    ...(deployed ? ["Deployed shapes (server, producers and workers each in their own process):", "", deployed, ""] : []),
    ...(inProcess ? ["Server in-process diagnostics (the load generator and the server in one process):", "", inProcess, ""] : []),
    README_END,
  ].join("\n");
  writeFileSync(path, text.slice(0, from) + block + text.slice(to + README_END.length));
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  for (const p of leftovers) p.kill("SIGKILL");
  process.exit(1);
});
