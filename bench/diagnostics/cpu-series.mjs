// Diagnostic: the latency rows' shape (a producer process paced at RATE items/s, one worker process
// at concurrency 10) run once per entry of SEQUENCE, with each process's CPU and minor page faults
// second by second, the server's split into its main thread and the rest (V8's compiler and GC
// helpers), and the run's p99 over its first second against the rest. SEQUENCE is a comma list of
// switchyard, bullmq, relay and idle (25 s of nothing, as a full run leaves each system between its
// rounds); every run is on a fresh queue, as the bench's rounds are.
//   node bench/diagnostics/cpu-series.mjs [ITEMS] [RATE] [SEQUENCE]   (after npm run bench built dist-bench/)
//   e.g. node bench/diagnostics/cpu-series.mjs 5000 500 switchyard,switchyard,idle,switchyard
// SERVER_NODE_ARGS passes node arguments to the server child; with BENCH_SERVER_STDOUT=FILE (and, say,
// SERVER_NODE_ARGS="--trace-opt --trace-deopt") a line "=== run X" / "=== idle" marks each step in FILE.
import { appendFileSync, readdirSync } from "node:fs";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { percentile, procStat, sleep } from "../../dist-bench/lib.js";

const [items = 5000, rate = 500] = process.argv.slice(2, 4).map(Number);
const sequence = (process.argv[4] ?? "switchyard").split(",");

/** The process's main thread and its other threads, CPU ms. */
const threads = (pid) => {
  let main = 0, other = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      const { cpuMs } = procStat(`/proc/${pid}/task/${t}/stat`);
      if (Number(t) === pid) main += cpuMs;
      else other += cpuMs;
    } catch {} // a thread that ended meanwhile
  }
  return { main, other };
};
const mark = (line) => process.env.BENCH_SERVER_STDOUT && appendFileSync(process.env.BENCH_SERVER_STDOUT, `=== ${line}\n`);

const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1, serverNodeArgs: process.env.SERVER_NODE_ARGS?.split(" ").filter(Boolean) });
try {
  for (const system of sequence) {
    mark(system === "idle" ? "idle" : `run ${system}`);
    if (system === "idle") {
      await sleep(25_000);
      console.log("idle 25 s");
      continue;
    }
    const agents = system === "relay" ? await d.echoPids().then((e) => ({ relay: e.server })) : { worker: d.workerPids[system][0], producer: d.producerPids[system] };
    const pids = { ...(system === "switchyard" && { server: d.serverPid }), ...agents, redis: redis.server.process.pid };
    const read = () => ({ procs: Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, procStat(`/proc/${pid}/stat`)])), server: pids.server && threads(pids.server) });
    let before = read();
    const seconds = [];
    const every = setInterval(() => {
      const now = read();
      const split = now.server ? `server main ${now.server.main - before.server.main} other ${now.server.other - before.server.other} | ` : "";
      seconds.push(split + Object.keys(pids).map((role) => `${role} ${now.procs[role].cpuMs - before.procs[role].cpuMs} ms pf ${now.procs[role].faults - before.procs[role].faults}`).join(" | "));
      before = now;
    }, 1000);
    const lat = await d.latencySamples(system, rate, items, 0, 10).finally(() => clearInterval(every));
    const first = lat.slice(0, rate), rest = lat.slice(rate);
    const slowest = lat.map((ms, i) => [ms, i]).sort((a, b) => b[0] - a[0]).slice(0, Math.ceil(lat.length / 100));
    console.log(
      `${system}: p50 ${percentile(lat, 50).toFixed(2)} p99 ${percentile(lat, 99).toFixed(2)} ms; first second p99 ${percentile(first, 99).toFixed(2)}, ` +
        `the rest ${percentile(rest, 99).toFixed(2)}; of the slowest 1 % (${slowest.length}), ${slowest.filter(([, i]) => i < rate).length} in the first second`,
    );
    seconds.forEach((line, i) => console.log(`  s${i + 1}: ${line}`));
  }
} finally {
  await d.stop();
  await redis.stop();
}
