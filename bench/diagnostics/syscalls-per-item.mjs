// Diagnostic: socket syscalls per item in the server and the worker process while one worker
// consumes a prefilled reliable queue at concurrency C (deployed shape), counted by `strace -c`.
// Shows how many Redis commands and socket writes an item costs, and that grpc-js / Node's
// http2 flush a turn's messages in one writev.
//   node bench/diagnostics/syscalls-per-item.mjs [C] [ITEMS]   (after npm run bench built dist-bench/; needs strace)
import { spawn } from "node:child_process";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const c = Number(process.argv[2] ?? 1), n = Number(process.argv[3] ?? 3000);
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { systems: ["switchyard"], workers: 1 });
try {
  await d.consume("switchyard", "reliable", 1, c, 2000); // warm-up
  const pids = { server: d.serverPid, worker: d.workerPids.switchyard[0] };
  const calls = "trace=write,writev,read,readv,epoll_wait,epoll_pwait";
  const traces = Object.entries(pids).map(([role, pid]) => {
    const t = spawn("strace", ["-f", "-c", "-e", calls, "-p", String(pid)], { stdio: ["ignore", "ignore", "pipe"] });
    const out = { role, text: "" };
    t.stderr.on("data", (b) => (out.text += b));
    return { t, out };
  });
  await sleep(1000); // strace attached
  const rate = await d.consume("switchyard", "reliable", 1, c, n);
  for (const { t } of traces) t.kill("SIGINT");
  await sleep(1000);
  console.log(`c = ${c}, ${n} items, ${rate.toFixed(0)} items/s under strace; syscalls per item:`);
  for (const { out } of traces) {
    const rows = [...out.text.matchAll(/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$/gm)].map((m) => `${m[2]} ${(Number(m[1]) / n).toFixed(2)}`);
    console.log(`  ${out.role.padEnd(7)} ${rows.join(", ")}`);
  }
} finally {
  await d.stop();
  await redis.stop();
}
