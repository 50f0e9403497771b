// Diagnostic: Redis commands and Redis CPU per item (INFO commandstats) while one worker process
// consumes a prefilled queue at concurrency C, Switchyard (reliable, recovery set) and BullMQ,
// deployed shape. The prefill is not counted (the stats are reset after it).
//   node bench/diagnostics/redis-per-item.mjs [C] [ITEMS]   (after npm run bench built dist-bench/)
import { Deployed } from "../../dist-bench/deployed.js";
import { startBenchRedis } from "../../dist-bench/env.js";

const c = Number(process.argv[2] ?? 1), n = Number(process.argv[3] ?? 3000);
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1 });
const stats = async () => {
  const text = await redis.plain.info("commandstats");
  return [...text.matchAll(/cmdstat_(\S+):calls=(\d+),usec=(\d+)/g)].map((m) => ({ cmd: m[1], calls: Number(m[2]), usec: Number(m[3]) }));
};
try {
  for (const system of ["switchyard", "bullmq"]) {
    await d.consume(system, "reliable", 1, c, 2000); // warm-up
    const rate = await d.consume(system, "reliable", 1, c, n, async () => void (await redis.plain.config("RESETSTAT")));
    const rows = (await stats()).filter((r) => !["info", "config", "llen", "scan", "unlink"].includes(r.cmd)).sort((a, b) => b.usec - a.usec);
    // A script's time includes the commands it runs, which are also counted on their own: count top-level calls only.
    const nested = new Set(["evalsha", "eval", "fcall"]);
    const scripted = rows.some((r) => nested.has(r.cmd));
    const total = rows.filter((r) => !scripted || nested.has(r.cmd) || ["blmove", "bzpopmin", "rpop", "incrby", "lpush"].includes(r.cmd)).reduce((a, r) => a + r.usec, 0);
    console.log(`${system}, c = ${c}, ${n} items (${rate.toFixed(0)}/s): ${(total / n).toFixed(1)} µs of Redis CPU per item (scripts count their commands' time too)`);
    for (const r of rows.filter((r) => r.calls >= n / 100)) console.log(`  ${r.cmd.padEnd(14)} ${(r.calls / n).toFixed(3)} calls/item  ${(r.usec / Math.max(1, r.calls)).toFixed(1)} µs/call`);
  }
} finally {
  await d.stop();
  await redis.stop();
}
