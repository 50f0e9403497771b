// Diagnostic: our server's stop on a paced item, mark by mark, in the latency rows' shape (a producer
// process paced at RATE items/s, one worker process at concurrency 10, the server a child of its own). The
// server's JavaScript stamps its marks (server-timeline-hooks.mjs, preloaded) and `perf record -k
// CLOCK_MONOTONIC` takes its main thread's syscalls on the same clock, for SECONDS from 1.5 s into a run
// (after 3,000 paced items at 1,000/s of warm-up). Each item is read from the wake-up (epoll_pwait's
// return) that brings its Enqueue: the µs from it to each mark, p50 and p90 over the items: grpc-js's data
// frame, the request's deserializer, the queue core, the push-lease's write(2) to Redis and its return, the
// main thread's next switch off its CPU, Redis's answer read(2), the deliveries handed to their streams,
// the grpc-js sends (the delivery's, then the Enqueue's answer) and the two writev(2)s that carry them.
//   node bench/diagnostics/server-timeline.mjs [RATE] [SECONDS]   (after npm run bench built dist-bench/; needs perf, as root)
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const rate = Number(process.argv[2] ?? 100), seconds = Number(process.argv[3] ?? 4);
const dir = mkdtempSync(join(tmpdir(), "sy-timeline-"));
const redis = await startBenchRedis();
const hooks = new URL("./server-timeline-hooks.mjs", import.meta.url).pathname;
const d = await Deployed.start(redis, { workers: 1, systems: ["switchyard"], serverNodeArgs: ["--import", hooks], serverEnv: { SERVER_TIMELINE_DIR: dir } });
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
try {
  await d.latency("switchyard", 1000, 3000, 0, 10);
  const run = d.latency("switchyard", rate, Math.round(rate * (seconds + 3)), 0, 10);
  await sleep(1500);
  const data = join(dir, "perf.data");
  const events = ["syscalls:sys_exit_epoll_pwait", "syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_exit_write", "syscalls:sys_enter_writev", "sched:sched_switch"];
  const perf = spawn("perf", ["record", "-q", "-k", "CLOCK_MONOTONIC", "-o", data, "-p", String(d.serverPid), "-e", events.join(","), "--", "sleep", String(seconds)], { stdio: "ignore" });
  await new Promise((ok) => perf.once("exit", ok));
  const spread = await run;
  process.kill(d.serverPid, "SIGUSR2");
  await sleep(500);
  const flat = JSON.parse(readFileSync(join(dir, `stamps-${d.serverPid}.json`), "utf8"));
  const text = execFileSync("perf", ["script", "-i", data, "-F", "tid,time,event,trace"], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
  const all = []; // [name, µs], syscalls of the main thread and JavaScript marks, in time order
  for (const line of text.split("\n")) {
    const m = /^\s*(\d+)\s+([\d.]+):\s+(?:syscalls:sys_|sched:)(\S+):\s*(.*)$/.exec(line);
    if (m && Number(m[1]) === d.serverPid) all.push([m[3], Number(m[2]) * 1e6, /fd: (0x[0-9a-f]+)/.exec(m[4])?.[1]]);
  }
  const from = all[0]?.[1] ?? 0, to = all.at(-1)?.[1] ?? 0;
  for (let i = 0; i < flat.length; i += 2) if (flat[i + 1] >= from && flat[i + 1] <= to) all.push([flat[i], flat[i + 1]]);
  all.sort((a, b) => a[1] - b[1]);
  const rows = [];
  for (let i = 0; i < all.length; i++) {
    if (all[i][0] !== "exit_epoll_pwait") continue;
    const woke = all[i][1];
    const stop = [];
    for (let j = i + 1; j < all.length && all[j][1] - woke < 3000; j++) stop.push(all[j]);
    if (!stop.slice(0, 3).some((e) => e[0] === "grpc: data frame")) continue; // a wake-up that brought no Enqueue
    const row = new Map();
    const after = (name, at = 0, n = 1) => stop.filter((e) => e[0] === name && e[1] - woke >= at)[n - 1];
    for (const e of stop) if (!e[0].includes("_") && !row.has(e[0])) row.set(e[0], e[1] - woke);
    const pushed = row.get("QueueDispatcher.push");
    if (pushed === undefined || !row.has("distribute")) continue;
    const write = after("enter_write", pushed);
    if (!write) continue;
    const at = write[1] - woke;
    row.set("write(2) to Redis", at);
    row.set("… returned", after("exit_write", at)?.[1] - woke);
    row.set("… main thread off its CPU", after("sched_switch", at)?.[1] - woke);
    row.set("Redis's answer read(2)", after("enter_read", at)?.[1] - woke);
    const dist = row.get("distribute");
    row.set("grpc: sendMessage (delivery)", after("grpc: sendMessage", dist)?.[1] - woke);
    row.set("grpc: sendMessage (answer)", after("grpc: sendMessage", dist, 2)?.[1] - woke);
    row.set("writev(2) (delivery)", after("enter_writev", dist)?.[1] - woke);
    row.set("writev(2) (answer)", after("enter_writev", dist, 2)?.[1] - woke);
    rows.push(row);
  }
  const order = ["grpc: data frame", "deserialize", "deserialized", "Queues.enqueueIds", "Queues.write (prepared)", "QueueDispatcher.push",
    "write(2) to Redis", "… returned", "push-lease sent", "… main thread off its CPU", "Redis's answer read(2)", "distribute",
    "grpc: sendMessage (delivery)", "writev(2) (delivery)", "grpc: sendMessage (answer)", "writev(2) (answer)"];
  console.log(`${rate}/s: p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms; ${rows.length} items; µs from the wake-up that brought the Enqueue, p50 / p90:`);
  for (const name of order) {
    const xs = rows.map((r) => r.get(name)).filter((x) => Number.isFinite(x));
    console.log(`  ${name.padEnd(30)} ${xs.length ? `${pct(xs, 0.5).toFixed(0).padStart(5)} ${pct(xs, 0.9).toFixed(0).padStart(5)}` : "    -"}`);
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
