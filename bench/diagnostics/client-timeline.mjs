// Diagnostic: the producer's and the worker's stops on a paced item, mark by mark, Switchyard's against
// the relay with Redis (a plain grpc-js relay that LPUSHes each message), in the latency rows' shape (a
// producer process paced at RATE items/s, one worker process at concurrency 10). Each agent's JavaScript
// stamps its marks (client-timeline-hooks.mjs, preloaded) and `perf record -k CLOCK_MONOTONIC` takes both
// processes' main-thread syscalls on the same clock, for SECONDS from 1.5 s into each run (after 3,000
// paced items at 1,000/s of warm-up per system), ROUNDS runs per system, alternating. The producer is
// read from its item's stringify (its send time is taken just before): its client's marks, its write(2)
// or writev(2), and its main thread's next switch off its CPU. The worker is read from the wake-up
// (epoll_pwait's return) that brings a delivery: its read(2), grpc-js's message read, Switchyard's
// LeaseSession.push (the delivery decoded) and the handler's start. µs, p50 / p90 over the items.
//   node bench/diagnostics/client-timeline.mjs [RATE] [SECONDS] [ROUNDS]   (after npm run bench built dist-bench/; needs perf, as root)
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const rate = Number(process.argv[2] ?? 100), seconds = Number(process.argv[3] ?? 4), rounds = Number(process.argv[4] ?? 2);
const dir = mkdtempSync(join(tmpdir(), "sy-client-timeline-"));
process.env.CLIENT_TIMELINE_DIR = dir;
const redis = await startBenchRedis();
const hooks = new URL("./client-timeline-hooks.mjs", import.meta.url).pathname;
const d = await Deployed.start(redis, { workers: 1, systems: ["switchyard"], agentNodeArgs: ["--import", hooks] });
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const events = ["syscalls:sys_exit_epoll_pwait", "syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_enter_writev", "sched:sched_switch"];

/** One process's syscalls (its main thread's) and JavaScript marks, as [name, µs], in time order. */
function timeline(data, pid) {
  const text = execFileSync("perf", ["script", "-i", data, "-F", "tid,time,event"], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
  const all = [];
  for (const line of text.split("\n")) {
    const m = /^\s*(\d+)\s+([\d.]+):\s+(?:syscalls:sys_|sched:)(\S+):/.exec(line);
    if (m && Number(m[1]) === pid) all.push([m[3], Number(m[2]) * 1e6]);
  }
  const from = all[0]?.[1] ?? 0, to = all.at(-1)?.[1] ?? 0;
  const flat = JSON.parse(readFileSync(join(dir, `stamps-${pid}.json`), "utf8"));
  for (let i = 0; i < flat.length; i += 2) if (flat[i + 1] >= from && flat[i + 1] <= to) all.push([flat[i], flat[i + 1]]);
  return all.sort((a, b) => a[1] - b[1]);
}

/** µs from each start (isStart) to the first of each name after it, until `until`, by name; only starts `keep` keeps. */
function marks(all, isStart, until, keep = () => true) {
  const out = new Map();
  for (let i = 0; i < all.length; i++) {
    if (!isStart(all, i)) continue;
    const row = new Map();
    for (let j = i + 1; j < all.length && all[j][1] - all[i][1] < 3000; j++) {
      const [name, t] = all[j];
      if (!row.has(name)) row.set(name, t - all[i][1]);
      if (until(name)) break;
    }
    if (!keep(row)) continue;
    for (const [name, us] of row) {
      if (!out.has(name)) out.set(name, []);
      out.get(name).push(us);
    }
  }
  return out;
}

const show = (label, out, order) => {
  const cells = order.map((name) => {
    const xs = out.get(name) ?? [];
    return `${name} ${xs.length ? `${pct(xs, 0.5).toFixed(0)} / ${pct(xs, 0.9).toFixed(0)}` : "-"}`;
  });
  console.log(`  ${label}: ${cells.join(", ")}`);
};

try {
  const relay = await d.relayPids();
  for (const s of ["switchyard", "relay-push"]) await d.latency(s, 1000, 3000, 0, 10);
  for (let r = 1; r <= rounds; r++) {
    for (const system of ["switchyard", "relay-push"]) {
      const producer = system === "switchyard" ? d.producerPids.switchyard : relay.producer;
      const worker = system === "switchyard" ? d.workerPids.switchyard[0] : relay.worker;
      const run = d.latency(system, rate, Math.round(rate * (seconds + 3)), 0, 10);
      await sleep(1500);
      const data = join(dir, `perf-${system}-${r}.data`);
      const perf = spawn("perf", ["record", "-q", "-k", "CLOCK_MONOTONIC", "-o", data, "-p", `${producer},${worker}`, "-e", events.join(","), "--", "sleep", String(seconds)], { stdio: "ignore" });
      await new Promise((ok) => perf.once("exit", ok));
      const spread = await run;
      for (const pid of [producer, worker]) process.kill(pid, "SIGUSR2");
      await sleep(500);
      console.log(`${system}, round ${r}: p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms; µs p50 / p90`);
      const sent = marks(timeline(data, producer), (all, i) => all[i][0] === "item", (name) => name === "sched_switch");
      show("producer, from the item's stringify", sent, ["SwitchyardClient.enqueue", "EnqueueStream.write", "enter_write", "enter_writev", "sched_switch"]);
      // Only wake-ups that led to a handler: a paced item's, not a settle result's or a heartbeat's.
      const got = marks(timeline(data, worker), (all, i) => all[i][0] === "exit_epoll_pwait", (name) => name === "handler" || name === "sched_switch", (row) => row.has("handler"));
      const handled = got.get("handler")?.length ?? 0;
      show(`worker, from the wake-up (${handled} handled)`, got, ["enter_read", "grpc: message read", "LeaseSession.push (decoded)", "handler"]);
    }
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
