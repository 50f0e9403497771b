// Check: a cron job whose next tick is more than 2^31-1 ms (24.8 days) away must not run now. Before
// fb7a568 setTimeout clamped the delay to 1 ms and the job ran for every future tick in a tight loop
// (883 runs in 2 s); the host clock now chains long timers, and this prints 0 runs.
//   node bench/diagnostics/cron-timer-overflow.mjs
import { startBenchRedis, startBenchApp } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";
const redis = await startBenchRedis();
let calls = 0;
const sy = await startBenchApp(redis.socketPath, { config: { namespace: "ovf" }, handlers: { Count: async () => { calls++; return ""; } } });
const job = await sy.client.createJob({ name: "yearly", target: "Count", schedule: "0 0 0 1 1 *", timeZone: "UTC", executePolicy: 1 });
await sy.client.resumeJob(job.id);
await sleep(2000);
console.log(`now ${new Date().toISOString()}; yearly job (next 1 Jan) ran ${calls} times in 2 s; mounted: ${sy.app.scheduler.mounted().includes(job.id)}`);
const logs = await sy.client.listJobLogs(job.id, 5);
console.log("first log ticks:", logs.logs.slice(0, 3).map((l) => new Date(Number(l.tickTime.seconds) * 1000).toISOString()));
await sy.stop(); await redis.stop();
process.exit(0);
