// Diagnostic: who wakes whom, per item, in the latency rows' shape (a producer process paced at RATE
// items/s, one worker process at concurrency 10): Switchyard (producer, server, worker, Redis), BullMQ
// (producer, worker, Redis), the relay floor (producer, plain grpc-js relay, worker) and the relay with an
// LPUSH per item (the same and Redis), read from the
// kernel's sched_waking, sched_migrate_task and sched_switch events (`perf sched record -a` for SECONDS,
// from 2 s into a run of RATE × (SECONDS + 4) items, after 3,000 paced items at 1,000/s of warm-up).
// Each waker → wakee pair of the processes' main threads (their pids; helper threads are not counted) is
// counted per item, split by whether the wakee was put on the waker's CPU ("same": it runs once the
// waker sleeps or is preempted) or on the other ("other": an interprocessor wake-up, dear on a guest),
// with the median time from a wake-up until its wakee ran ("waited") and the median length of the run
// that followed, until the wakee slept again (time on its CPU, preemptions left out: the CPU that stop
// on an item's way took, wake-up handling, interrupts and any time the host held the vCPU included; a
// sleep of any kind ends it, a futex wait on a helper thread too, and what follows that sleep is not
// counted unless a tracked process woke it). A wake-up made from an interrupt (a timer, a socket's
// softirq) is charged to the task it interrupted. "idle" is the share of a pair's wake-ups made while
// another CPU was idle (the kernel could have put the wakee there). The server's and the relay's wake-ups
// of Redis are split by the tracked process whose wake-up the waker had last ("after producer": an item's
// push; "after worker": an ack's settle; "after redis": a call sent once an answer came).
// Pairs under 0.005 an item are left out, of the total too.
//   node bench/diagnostics/wakeups-per-item.mjs [RATE] [SECONDS]   (after npm run bench built dist-bench/; needs perf, as root)
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const rate = Number(process.argv[2] ?? 100), seconds = Number(process.argv[3] ?? 3);
const median = (xs) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : NaN);
const dir = mkdtempSync(join(tmpdir(), "sy-wakeups-"));
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1 });
try {
  for (const system of ["switchyard", "bullmq", "relay", "relay-push"]) {
    await d.latency(system, 1000, 3000, 0, 10);
    const relay = system.startsWith("relay") ? await d.relayPids() : undefined;
    const roles = new Map(
      relay
        ? [[relay.producer, "producer"], [relay.server, "relay"], [relay.worker, "worker"], ...(system === "relay-push" ? [[redis.server.process.pid, "redis"]] : [])]
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
    const all = []; // each wake-up of a tracked process by another: { key, wakerCpu, dest, at, waited, ran }
    const pending = new Map(); // wakee pid → its wake-up, until the wakee runs
    const justWoken = new Map(); // CPU → the wake-up that was its last event
    const onCpu = new Set(); // pids on a CPU (from sched_switch)
    const running = new Map(); // pid → the run after a wake-up: { w, total, at (undefined while preempted) }
    const current = new Map(); // CPU → the pid it runs (from sched_switch; "0": idle)
    const wokenBy = new Map(); // role → the role whose wake-up it had last
    for (const line of text.split("\n")) {
      const m = /^\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):(.*)$/.exec(line);
      if (!m) continue;
      const [, tid, cpu, time, event, rest] = m;
      const us = Number(time) * 1e6;
      const woken = justWoken.get(cpu);
      justWoken.delete(cpu);
      if (event === "sched_switch") {
        const sw = /prev_pid=(\d+) .*prev_state=(\S+) .*next_pid=(\d+)/.exec(rest);
        if (!sw) continue;
        const [, prev, state, next] = sw;
        onCpu.delete(prev);
        const raced = pending.get(prev);
        if (raced?.early) {
          // Woken as it was going to sleep: if it does sleep now, the wake-up runs it again (a wait, then a
          // run of its own); if it stays runnable, or sleeps only much later, it never slept after the wake-up.
          raced.early = false;
          if (state.startsWith("R") || us - raced.at > 200) {
            raced.waited = 0;
            pending.delete(prev);
          }
        }
        const r = running.get(prev);
        if (r && r.at !== undefined) {
          r.total += us - r.at;
          r.at = undefined;
          // Preempted (still runnable), the run goes on when it is back; asleep, it has ended.
          if (!state.startsWith("R")) {
            r.w.ran = r.total;
            running.delete(prev);
          }
        }
        onCpu.add(next);
        current.set(Number(cpu), next);
        const resumed = running.get(next);
        if (resumed) resumed.at = us;
        else if (pending.has(next)) {
          const w = pending.get(next);
          pending.delete(next);
          w.waited = us - w.at;
          running.set(next, { w, total: 0, at: us });
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
      // A wake-up not followed by a run is left with no wait or run (one that came as its wakee was still on
      // its CPU, with no wait).
      const superseded = pending.get(pid);
      if (superseded?.early) superseded.waited = 0;
      pending.delete(pid);
      const waker = roles.get(Number(tid)), wakee = roles.get(Number(pid));
      if (!waker || !wakee) continue;
      const after = wokenBy.get(waker);
      wokenBy.set(wakee, waker);
      const split = wakee === "redis" && (waker === "server" || waker === "relay") && after ? ` (after ${after})` : "";
      let otherIdle = false;
      for (const [c, p] of current) if (c !== Number(cpu) && p === "0") otherIdle = true;
      const w = { key: `${waker} → ${wakee}${split}`, wakerCpu: Number(cpu), dest: Number(wake[2]), at: us, otherIdle };
      all.push(w);
      justWoken.set(cpu, { pid, w });
      // Woken while still on its CPU: it was about to sleep (its switch-out, next, tells whether it did; see
      // above), or it had not, and its run goes on, counted for the wake-up that began it.
      if (onCpu.has(pid)) {
        w.early = true;
        pending.set(pid, w);
      } else if (running.has(pid)) w.waited = 0;
      else pending.set(pid, w);
    }
    const counts = new Map();
    for (const w of all) {
      const c = counts.get(w.key) ?? { same: 0, other: 0, idle: 0, waited: [], ran: [] };
      c[w.dest === w.wakerCpu ? "same" : "other"]++;
      if (w.otherIdle) c.idle++;
      if (w.waited !== undefined) c.waited.push(w.waited);
      if (w.ran !== undefined) c.ran.push(w.ran);
      counts.set(w.key, c);
    }
    const n = rate * seconds;
    let total = 0;
    const rows = [...counts].sort().filter(([, c]) => (c.same + c.other) / n >= 0.005).map(([key, c]) => {
      total += c.same + c.other;
      return `  ${key.padEnd(20)} ${((c.same + c.other) / n).toFixed(2)} (same CPU ${(c.same / n).toFixed(2)}, other ${(c.other / n).toFixed(2)}; idle ${(c.idle / (c.same + c.other)).toFixed(2)}); waited ${median(c.waited).toFixed(0)} µs, then ran ${median(c.ran).toFixed(0)} µs (medians)`;
    });
    console.log(`${system}, ${rate}/s (the run's p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms): wake-ups per item, ${(total / n).toFixed(2)} in all`);
    console.log(rows.join("\n"));
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
