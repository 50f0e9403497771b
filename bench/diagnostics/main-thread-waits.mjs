// Diagnostic: while a process's main thread was runnable but waited for a CPU, what held the CPUs. The
// latency rows' shape (a producer process paced at RATE items/s, one worker process at concurrency 10),
// Switchyard only, after 3,000 paced items at 1,000/s of warm-up; `perf sched record -a` for SECONDS from
// 2 s into a run, read with `perf sched timehist`. For the main threads of the server, the producer, the
// worker and Redis: how many runs began after a wait ("sch delay") over 0.5 and over 1 ms, the waits'
// sum, and for the waits over 0.5 ms what ran meanwhile, in ms of overlap: on the waiting thread's own
// CPU and on the other, by owner (the process's own helper threads, i.e. V8's compiler and GC helpers
// and libuv's pool; another's main thread or helpers; anything else by name; idle). Also each
// process's helper threads' CPU time in the window. The server child takes SWITCHYARD_BACKGROUND_NICE
// from this process's environment: run it with =0 and without to compare.
//   node bench/diagnostics/main-thread-waits.mjs [RATE] [SECONDS]   (after npm run bench built dist-bench/; needs perf, as root)
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const rate = Number(process.argv[2] ?? 100), seconds = Number(process.argv[3] ?? 10);
const dir = mkdtempSync(join(tmpdir(), "sy-waits-"));
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1 });
try {
  await d.latency("switchyard", 1000, 3000, 0, 10);
  const roles = new Map([
    [d.serverPid, "server"],
    [d.producerPids.switchyard, "producer"],
    [d.workerPids.switchyard[0], "worker"],
    [redis.server.process.pid, "redis"],
  ]);
  const run = d.latency("switchyard", rate, Math.round(rate * (seconds + 4)), 0, 10);
  await sleep(2000); // recorded from the middle of the run
  const file = join(dir, "sched.data");
  const perf = spawn("perf", ["sched", "record", "-q", "-o", file, "-a", "--", "sleep", String(seconds)], { stdio: "ignore" });
  await new Promise((ok) => perf.once("exit", ok));
  await run;
  const text = execFileSync("perf", ["sched", "timehist", "-i", file], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
  // Each line: the time a run ended, its CPU, "name[tid/pid]" (or "name[pid]" for a main thread), wait, sch delay, run (ms).
  const runs = [];
  for (const line of text.split("\n")) {
    const m = /^\s*([\d.]+)\s+\[(\d+)\]\s+(<idle>|.+?\[(\d+)(?:\/(\d+))?\])\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$/.exec(line);
    if (m) {
      const end = Number(m[1]) * 1000, ran = Number(m[8]);
      const name = m[3].replace(/\[.*$/, "");
      runs.push({ cpu: Number(m[2]), name, tid: Number(m[4] ?? -1), pid: Number(m[5] ?? m[4] ?? -1), delay: Number(m[7]), from: end - ran, to: end });
    }
  }
  const ownerOf = (r, waiting) => {
    if (r.name === "<idle>") return "idle";
    const role = roles.get(r.pid);
    if (!role) return `${r.name} (not of the four)`; // the bench's own process, BullMQ's idle agents, a kernel thread
    if (r.tid === r.pid) return `${role} main`;
    return r.pid === waiting ? "its own helpers" : `${role}'s helpers`;
  };
  const cpuOf = (pid) => runs.filter((r) => r.pid === pid && r.tid !== pid).reduce((s, r) => s + (r.to - r.from), 0);
  for (const [pid, role] of roles) {
    const mine = runs.filter((r) => r.tid === pid);
    const waits = mine.filter((r) => r.delay > 0.5);
    const held = new Map();
    for (const w of waits) {
      const from = w.from - w.delay, to = w.from;
      for (const r of runs) {
        const overlap = Math.min(r.to, to) - Math.max(r.from, from);
        if (overlap <= 0 || r.tid === pid) continue;
        const key = `${r.cpu === w.cpu ? "same CPU" : "other CPU"}: ${ownerOf(r, pid)}`;
        held.set(key, (held.get(key) ?? 0) + overlap);
      }
    }
    const sum = mine.reduce((s, r) => s + r.delay, 0);
    console.log(
      `${role}: ${mine.length} runs, ${waits.length} after a wait > 0.5 ms, ${mine.filter((r) => r.delay > 1).length} > 1 ms; waits ${sum.toFixed(1)} ms in all; ` +
        `its helper threads ran ${cpuOf(pid).toFixed(1)} ms`,
    );
    const top = [...held].sort((a, b) => b[1] - a[1]).slice(0, 8);
    console.log(`  during the waits > 0.5 ms: ${top.map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ") || "none"}`);
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
