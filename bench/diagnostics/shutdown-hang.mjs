// Repro: a worker (runWorker, credit 10) stops while a paced producer's items are still queued;
// afterwards the server may still hold a stream (credit 0, ~6 deliveries held) although runWorker.stop()
// returned, and app.stop() does not return within 30 s: drain waits its grace, forceShutdown runs, but
// tryShutdown's callback never fires. Run after `npm run bench` built dist/ and dist-bench/:
//   node bench/diagnostics/shutdown-hang.mjs
import { startBenchRedis, startBenchApp } from "../../dist-bench/env.js";
import { QueueMode } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../dist/client/worker.js";
import { sleep, within, payload } from "../../dist-bench/lib.js";
import { performance } from "node:perf_hooks";
const redis = await startBenchRedis();
const sy = await startBenchApp(redis.socketPath);
const name = "{h}";
await sy.client.createQueue({ name, mode: QueueMode.RELIABLE });
const w = runWorker({ client: sy.client, queue: name, concurrency: 10, handler: () => {} });
await sleep(300);
const ps = [];
const t0 = performance.now();
for (let i = 0; i < 1000; i++) { const due = t0 + i * 2; const d = due - performance.now(); if (d >= 1) await sleep(d); ps.push(sy.client.enqueue(name, [payload(100, i)])); }
await Promise.all(ps);
await w.stop();
console.log("queue len", await redis.plain.llen(name), "processing", await redis.plain.llen(`${name}.processing`));
const wrap = (obj, name, label) => { const orig = obj[name].bind(obj); obj[name] = async (...a) => { const t = performance.now(); console.log(`> ${label}`); try { return await orig(...a); } finally { console.log(`< ${label} ${(performance.now() - t).toFixed(0)} ms`); } }; };
wrap(sy.app.queues, "drain", "queues.drain"); wrap(sy.app.queues, "stop", "queues.stop"); wrap(sy.app.scheduler, "stop", "scheduler.stop"); wrap(sy.app.redis, "close", "redis.close");
wrap(sy.app.queues, "closeStream", "queues.closeStream");
console.log("streams open on server:", sy.app.queues.streams?.size, [...(sy.app.queues.streams ?? [])].map((s) => ({ held: s.held.size, closed: s.closed, credit: s.credit })));
const t = performance.now();
try { await within(sy.stop(), 30000, "app.stop"); console.log(`app.stop took ${(performance.now() - t).toFixed(0)} ms`); }
catch (e) { console.log(e.message); }
await redis.stop();
process.exit(0);
