// Diagnostic: Redis commands and each process's CPU per item while one Switchyard worker process consumes a prefilled
// STREAM queue (consumer group) at concurrency C, deployed shape. The prefill's XADDs are left out.
//   node bench/diagnostics/stream-per-item.mjs [C] [ITEMS]   (after npm run bench built dist-bench/)
import { procStat } from "../../dist-bench/lib.js";
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";

const c = Number(process.argv[2] ?? 10), n = Number(process.argv[3] ?? 20000);
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1, serverNodeArgs: process.env.SERVER_NODE_ARGS?.split(" ").filter(Boolean), agentNodeArgs: process.env.AGENT_NODE_ARGS?.split(" ").filter(Boolean) });
/** CPU ms (user + system) a process has used so far. */
const cpuMs = (pid) => procStat(`/proc/${pid}/stat`).cpuMs;
const stats = async () => {
  const text = await redis.plain.info("commandstats");
  return [...text.matchAll(/cmdstat_(\S+):calls=(\d+),usec=(\d+)/g)].map((m) => ({ cmd: m[1], calls: Number(m[2]), usec: Number(m[3]) }));
};
try {
  await d.consumeStream("switchyard", c, 2000); // warm-up
  await redis.plain.config("RESETSTAT");
  const pids = { redis: redis.server.process.pid, server: d.serverPid, worker: d.workerPids.switchyard[0] };
  const before = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, cpuMs(pid)]));
  const rate = await d.consumeStream("switchyard", c, n);
  // The prefill (XADD from this process) is in Redis's CPU too.
  console.log(`CPU µs per item: ${Object.entries(pids).map(([role, pid]) => `${role} ${(((cpuMs(pid) - before[role]) * 1000) / n).toFixed(0)}`).join(", ")}`);
  const rows = (await stats()).filter((r) => !["info", "config", "xadd", "xpending", "unlink", "del"].includes(r.cmd)).sort((a, b) => b.usec - a.usec);
  console.log(`switchyard stream, c = ${c}, ${n} items (${rate.toFixed(0)}/s)`);
  for (const r of rows.filter((r) => r.calls >= n / 100)) console.log(`  ${r.cmd.padEnd(14)} ${(r.calls / n).toFixed(3)} calls/item  ${(r.usec / Math.max(1, r.calls)).toFixed(1)} µs/call`);
} finally {
  await d.stop();
  await redis.stop();
}
