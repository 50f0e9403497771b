// Event-loop utilisation and latency of single-item Enqueue RPCs at a paced 100/s and 500/s, with and
// without a lease stream on the queue (client and server in one process, as in `npm run bench`).
//   node bench/diagnostics/enqueue-rpc-cost.mjs
import { startBenchRedis, startBenchApp } from "../../dist-bench/env.js";
import { QueueMode } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../dist/client/worker.js";
import { payload, percentile, sleep, within } from "../../dist-bench/lib.js";
import { monitorEventLoopDelay, performance } from "node:perf_hooks";
const redis = await startBenchRedis();
const sy = await startBenchApp(redis.socketPath);
const name = "{lat}";
await sy.client.createQueue({ name, mode: QueueMode.RELIABLE });
async function run(label, rate, N) {
  const h = monitorEventLoopDelay({ resolution: 1 }); h.enable();
  const e0 = performance.eventLoopUtilization();
  const rpc = []; const ps = [];
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const due = t0 + i * (1000 / rate); const w = due - performance.now(); if (w >= 1) await sleep(w);
    const s = performance.now();
    ps.push(sy.client.enqueue(name, [payload(100, i)]).then(() => rpc.push(performance.now() - s)));
  }
  await Promise.all(ps);
  const e = performance.eventLoopUtilization(e0); h.disable();
  console.log(`${label}: ${rate}/s: RPC p50 ${percentile(rpc, 50).toFixed(2)} p99 ${percentile(rpc, 99).toFixed(2)} ms; ELU ${(e.utilization * 100).toFixed(0)}%; loop delay p99 ${(h.percentile(99) / 1e6).toFixed(1)} ms`);
}
await run("no worker", 100, 300);
await run("no worker", 500, 1000);
await redis.plain.del(name);
const worker = runWorker({ client: sy.client, queue: name, concurrency: 10, handler: () => {} });
await sleep(300);
await run("with worker", 100, 300);
await run("with worker", 500, 1000);
await worker.stop();
await within(sy.stop(), 10_000, "app.stop").catch((e) => console.log(e.message)); // see shutdown-hang.mjs
await redis.stop();
process.exit(0);
