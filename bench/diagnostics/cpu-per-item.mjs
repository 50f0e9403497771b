// Diagnostic: CPU time per item in each process (from /proc/<pid>/stat: user + system, or system
// alone with --sys) while one worker process consumes a prefilled reliable queue at concurrency C,
// Switchyard (server child, worker process) and BullMQ (worker process), deployed shape, on one
// Redis. The prefill is not counted. At c = 1 every item costs each process its wake-ups: on a
// VM a socket write that wakes a sleeping process is dear, and Switchyard's extra hop pays it twice.
// With --latency RATE: the latency rows' shape instead (a producer process paced at RATE items/s,
// one worker process at concurrency 10, after the latency rows' warm pass (5,000 paced items at
// 1,000/s) and 250 items at RATE), the producer counted too, and between the two the relay with
// Redis (a plain grpc-js relay in the server's place that LPUSHes each item before it relays it:
// the latency rows' floor with Redis).
//   node bench/diagnostics/cpu-per-item.mjs [C] [ITEMS] [--sys] [--latency RATE]   (after npm run bench built dist-bench/)
// With --serial: serial enqueue instead (one producer process awaiting each single-item call):
// Switchyard (producer, server, Redis), BullMQ add and a raw ioredis LPUSH (producer, Redis), and
// the plain grpc-js echo's stream message (client, echo server), alone and LPUSHed before it is
// answered (client, echo server, Redis: the chain a serial enqueue crosses, bare), CPU µs per call of each.
// With --faults: minor page faults per item or call instead of CPU time (/proc/<pid>/stat's minflt).
// SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR" profiles the server child; AGENT_NODE_ARGS the worker processes.
import { procStat } from "../../dist-bench/lib.js";
import { Deployed } from "../../dist-bench/deployed.js";
import { deployedSizes } from "../../dist-bench/deployed-rows.js";
import { startBenchRedis } from "../../dist-bench/env.js";

const latencyAt = process.argv.includes("--latency") ? Number(process.argv[process.argv.indexOf("--latency") + 1]) : undefined;
const args = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && all[i - 1] !== "--latency");
const sysOnly = process.argv.includes("--sys");
const faults = process.argv.includes("--faults");
const serial = process.argv.includes("--serial");
const c = Number(args[0] ?? 1), n = Number(args[1] ?? 5000);
/** What a process has used so far: CPU µs (system time alone with --sys), or with --faults its minor page faults. */
const used = (pid) => {
  const stat = procStat(`/proc/${pid}/stat`);
  return faults ? stat.faults : (sysOnly ? stat.systemMs : stat.cpuMs) * 1000;
};
/** What the figures per item or call are. */
const what = faults ? "minor page faults" : sysOnly ? "system CPU µs" : "CPU µs";
const redis = await startBenchRedis();
const d = await Deployed.start(redis, { workers: 1, serverNodeArgs: process.env.SERVER_NODE_ARGS?.split(" ").filter(Boolean), agentNodeArgs: process.env.AGENT_NODE_ARGS?.split(" ").filter(Boolean) });
try {
  if (serial) {
    const echo = await d.echoPids();
    const runs = [
      ["switchyard", { producer: d.producerPids.switchyard, server: d.serverPid, redis: redis.server.process.pid }, () => d.enqueue("switchyard", n, 1, 1)],
      ["bullmq", { producer: d.producerPids.bullmq, redis: redis.server.process.pid }, () => d.enqueue("bullmq", n, 1, 1)],
      ["raw LPUSH", { producer: d.producerPids.bullmq, redis: redis.server.process.pid }, () => d.rawEnqueue(n, 1, 1)],
      ["echo (stream message)", { echoServer: echo.server, echoClient: echo.client }, () => d.echo("stream", n, 100)],
      ["echo, LPUSH each (stream message)", { echoServer: echo.server, echoClient: echo.client, redis: redis.server.process.pid }, () => d.echo("push", n, 100)],
    ];
    for (const [name, pids, go] of runs) {
      await go(); // warm-up
      const before = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, used(pid)]));
      const rate = await go();
      const per = Object.entries(pids).map(([role, pid]) => `${role} ${((used(pid) - before[role]) / n).toFixed(faults ? 3 : 0)}`);
      console.log(`${name}, serial, ${n} calls (${rate.toFixed(0)}/s, ${(1e6 / rate).toFixed(0)} µs each): ${what} per call: ${per.join(", ")}`);
    }
  }
  const systems = serial ? [] : latencyAt !== undefined ? ["switchyard", "relay-push", "bullmq"] : ["switchyard", "bullmq"];
  for (const system of systems) {
    if (latencyAt !== undefined) {
      const relay = system === "relay-push" ? await d.relayPids() : undefined;
      const all = relay
        ? { redis: redis.server.process.pid, server: relay.server, worker: relay.worker, producer: relay.producer }
        : { redis: redis.server.process.pid, ...(system === "switchyard" ? { server: d.serverPid } : {}), worker: d.workerPids[system][0], producer: d.producerPids[system] };
      // The latency rows' warm pass: a paced path runs half compiled for its first thousands of items.
      const warm = deployedSizes(1).latencyWarmup;
      await d.latency(system, warm.rate, warm.items, 0, 10);
      const before = Object.fromEntries(Object.entries(all).map(([role, pid]) => [role, used(pid)]));
      const spread = await d.latency(system, latencyAt, n, 250, 10);
      const per = Object.entries(all).map(([role, pid]) => `${role} ${((used(pid) - before[role]) / (n + 250)).toFixed(faults ? 3 : 0)}`);
      console.log(`${system}, ${latencyAt}/s, ${n} items (p50 ${spread.p50.toFixed(2)}, p99 ${spread.p99.toFixed(2)} ms): ${what} per item: ${per.join(", ")}`);
      continue;
    }
    const pids = { redis: redis.server.process.pid, ...(system === "switchyard" ? { server: d.serverPid } : {}), worker: d.workerPids[system][0] };
    await d.consume(system, "reliable", 1, c, 2000); // warm-up
    let before;
    const rate = await d.consume(system, "reliable", 1, c, n, async () => {
      before = Object.fromEntries(Object.entries(pids).map(([role, pid]) => [role, used(pid)]));
    });
    const per = Object.entries(pids).map(([role, pid]) => `${role} ${((used(pid) - before[role]) / n).toFixed(faults ? 3 : 0)}`);
    console.log(`${system}, c = ${c}, ${n} items (${rate.toFixed(0)}/s): ${what} per item: ${per.join(", ")}`);
  }
} finally {
  await d.stop();
  await redis.stop();
}
