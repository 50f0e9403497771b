// Diagnostic: who wakes whom, per item, in the latency rows' shape (a producer process paced at RATE
// items/s, one worker process at concurrency 10), Switchyard (producer, server, worker, Redis) against
// BullMQ (producer, worker, Redis), read from the kernel's sched_waking events (`perf sched record -a`
// for SECONDS in the middle of a run, after 3,000 paced items of warm-up). Each waker → wakee pair of
// the main threads is counted per item, split by whether the wakee was queued on the waker's CPU
// ("same": it runs once the waker sleeps or is preempted) or on the other ("other": an interprocessor
// wake-up, dear on a guest). On a VM a message to a sleeping process costs the writer part of that wake.
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
  for (const system of ["switchyard", "bullmq"]) {
    await d.latency(system, 1000, 3000, 0, 10);
    const roles = new Map([
      [redis.server.process.pid, "redis"],
      [d.producerPids[system], "producer"],
      [d.workerPids[system][0], "worker"],
      ...(system === "switchyard" ? [[d.serverPid, "server"]] : []),
    ]);
    const items = Math.round(rate * (seconds + 4));
    const run = d.latency(system, rate, items, 0, 10);
    await sleep(2000); // recorded from the middle of the run
    const file = join(dir, `${system}.data`);
    const perf = spawn("perf", ["sched", "record", "-q", "-o", file, "-a", "--", "sleep", String(seconds)], { stdio: "ignore" });
    await new Promise((ok) => perf.once("exit", ok));
    const spread = await run;
    const text = execFileSync("perf", ["script", "-i", file, "-F", "tid,cpu,event,trace"], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
    const counts = new Map();
    for (const m of text.matchAll(/^\s*(\d+)\s+\[(\d+)\]\s+sched:sched_waking: comm=\S+ pid=(\d+) .*target_cpu=(\d+)$/gm)) {
      const waker = roles.get(Number(m[1])), wakee = roles.get(Number(m[3]));
      if (!waker || !wakee) continue;
      const key = `${waker} → ${wakee}`;
      const c = counts.get(key) ?? { same: 0, other: 0 };
      c[Number(m[2]) === Number(m[4]) ? "same" : "other"]++;
      counts.set(key, c);
    }
    const n = rate * seconds;
    let total = 0;
    const rows = [...counts].sort().filter(([, c]) => (c.same + c.other) / n >= 0.005).map(([key, c]) => {
      total += c.same + c.other;
      return `  ${key.padEnd(20)} ${((c.same + c.other) / n).toFixed(2)} (same CPU ${(c.same / n).toFixed(2)}, other ${(c.other / n).toFixed(2)})`;
    });
    console.log(`${system}, ${rate}/s (the run's p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms): wake-ups per item, ${(total / n).toFixed(2)} in all`);
    console.log(rows.join("\n"));
  }
} finally {
  await d.stop();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
}
