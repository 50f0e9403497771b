// Diagnostic: who wakes whom, per item, in the latency rows' shape (a producer process paced at RATE
// items/s, one worker process at concurrency 10): Switchyard (producer, server, worker, Redis), BullMQ
// (producer, worker, Redis) and the relay floor (producer, plain grpc-js relay, worker), read from the
// kernel's sched_waking, sched_migrate_task and sched_switch events (`perf sched record -a` for SECONDS,
// from 2 s into a run of RATE × (SECONDS + 4) items, after 3,000 paced items at 1,000/s of warm-up).
// Each waker → wakee pair of the processes' main threads (their pids; helper threads are not counted) is
// counted per item, split by whether the wakee was put on the waker's CPU ("same": it runs once the
// waker sleeps or is preempted) or on the other ("other": an interprocessor wake-up, dear on a guest),
// with the median time from a wake-up until its wakee ran ("waited") and the median length of the run
// that followed, until the wakee slept or was preempted (what that stop on an item's way cost, its
// wake-up handling included). Pairs under 0.005 an item are left out, of the total too.
//   node bench/diagnostics/wakeups-per-item.mjs [RATE] [SECONDS]   (after npm run bench built dist-bench/; needs perf, as root)
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const rate = Number(process.argv[2] ?? 100), seconds = Number(process.argv[3] ?? 3);
const dir = mkdtempSync(join(tmpdir(), "sy-wakeups-"));
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1 });
try {
  for (const system of ["switchyard", "bullmq", "relay"]) {
    await d.latency(system, 1000, 3000, 0, 10);
    const relay = system === "relay" ? await d.relayPids() : undefined;
    const roles = new Map(
      relay
        ? [[relay.producer, "producer"], [relay.server, "relay"], [relay.worker, "worker"]]
        : [
            [redis.server.process.pid, "redis"],
            [d.producerPids[system], "producer"],
            [d.workerPids[system][0], "worker"],
            ...(system === "switchyard" ? [[d.serverPid, "server"]] : []),
          ],
    );
    const items = Math.round(rate * (seconds + 4));
    const run = d.latency(system, rate, items, 0, 10);
    await sleep(2000); // recorded from the middle of the run
    const file = join(dir, `${system}.data`);
    const perf = spawn("perf", ["sched", "record", "-q", "-o", file, "-a", "--", "sleep", String(seconds)], { stdio: "ignore" });
    await new Promise((ok) => perf.once("exit", ok));
    const spread = await run;
    const text = execFileSync("perf", ["script", "-i", file, "-F", "tid,cpu,time,event,trace"], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
    // sched_waking is traced in the waker, before the wakee's CPU is chosen: its target_cpu is where the wakee last
    // ran. If the wake-up moves it, sched_migrate_task is the waker CPU's next event (orig_cpu → dest_cpu).
    const wakings = new Map(); // wakee pid → its last waking: { key, wakerCpu, dest, at, waited, ran }
    const justWoken = new Map(); // CPU → the waking that was its last event
    const running = new Map(); // pid → { w: the waking its run followed, at: when the run began }
    const counts = new Map();
    const count = (w) => {
      if (!w.key) return;
      const c = counts.get(w.key) ?? { same: 0, other: 0, waited: [], ran: [] };
      c[w.dest === w.wakerCpu ? "same" : "other"]++;
      if (w.waited !== undefined) c.waited.push(w.waited);
      if (w.ran !== undefined) c.ran.push(w.ran);
      counts.set(w.key, c);
    };
    for (const line of text.split("\n")) {
      const m = /^\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):(.*)$/.exec(line);
      if (!m) continue;
      const [, tid, cpu, time, event, rest] = m;
      const us = Number(time) * 1e6;
      const woken = justWoken.get(cpu);
      justWoken.delete(cpu);
      if (event === "sched_switch") {
        const sw = /prev_pid=(\d+) .*next_pid=(\d+)/.exec(rest);
        if (!sw) continue;
        const ended = running.get(sw[1]);
        if (ended) ended.w.ran = us - ended.at;
        running.delete(sw[1]);
        const next = wakings.get(sw[2]);
        if (next && next.waited === undefined) {
          next.waited = us - next.at;
          running.set(sw[2], { w: next, at: us });
        }
        continue;
      }
      if (event === "sched_migrate_task") {
        const move = /pid=(\d+) .*orig_cpu=(\d+) dest_cpu=(\d+)/.exec(rest);
        if (move && woken && woken.pid === move[1]) woken.w.dest = Number(move[3]);
        continue;
      }
      if (event !== "sched_waking") continue;
      const wake = /pid=(\d+) .*target_cpu=(\d+)/.exec(rest);
      if (!wake) continue;
      const pid = wake[1];
      const last = wakings.get(pid);
      if (last) count(last);
      wakings.delete(pid);
      running.delete(pid);
      const waker = roles.get(Number(tid)), wakee = roles.get(Number(pid));
      if (!waker || !wakee) continue;
      const w = { key: `${waker} → ${wakee}`, wakerCpu: Number(cpu), dest: Number(wake[2]), at: us };
      wakings.set(pid, w);
      justWoken.set(cpu, { pid, w });
    }
    for (const w of wakings.values()) count(w);
    const n = rate * seconds;
    let total = 0;
    const rows = [...counts].sort().filter(([, c]) => (c.same + c.other) / n >= 0.005).map(([key, c]) => {
      total += c.same + c.other;
      const median = (xs) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : NaN);
      return `  ${key.padEnd(20)} ${((c.same + c.other) / n).toFixed(2)} (same CPU ${(c.same / n).toFixed(2)}, other ${(c.other / n).toFixed(2)}); waited ${median(c.waited).toFixed(0)} µs, then ran ${median(c.ran).toFixed(0)} µs (medians)`;
    });
    console.log(`${system}, ${rate}/s (the run's p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms): wake-ups per item, ${(total / n).toFixed(2)} in all`);
    console.log(rows.join("\n"));
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
