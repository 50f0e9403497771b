/**
 * Row 12 (issue 14): 10,000 delayed items due at the same moment, across three
 * server processes (`node dist/main.js`) on one Redis. The items are enqueued
 * with one `not_before` through all three instances (a third each, so each
 * instance's mover arms its timer for that moment); at it, all three movers
 * run promote.lua at once.
 *
 * Measured: each item's lateness (when a raw consumer in a process of its own,
 * kept across rounds, BLMPOP on the ready list, got it, on Redis's clock, minus
 * the due time); the movers' rate (items / (the last item's arrival at that
 * consumer − due), so its draining counts too); that every item was moved
 * exactly once (every id popped once, the delayed set and the list empty
 * after); and a raw LPUSH producer in a process of its own meanwhile (p50/p99
 * of each LPUSH in the second before the due time and from it until the last
 * item arrived).
 *
 * One burst runs first and is not recorded (the movers' code, and the raw
 * consumer's, is cold in fresh processes), as every other shape of the bench
 * has its warm-up; with `--only` there is none, and the first round runs them
 * cold.
 *
 * Alone: `npm run build && npx tsc -p bench/tsconfig.json && node dist-bench/delayed.js
 * [--rounds 3] [--items 10000]` (about 30 s); in `run.ts` as row 12.
 */
import { fork, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { Redis } from "ioredis";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../dist/client/client.js";
import { startBenchRedis, type BenchRedis } from "./env.js";
import { startServer } from "./streams.js";
import { fresh } from "./throughput.js";
import { leftovers, log, median, percentile, pool, sleep } from "./lib.js";
import type { Consumed, ConsumeRequest } from "./raw-consumer.js";

export interface DelayedShape {
  items: number;
  /** How far ahead the items are due when the enqueueing starts (ms): room to enqueue them all first. */
  leadMs: number;
}

export interface DelayedResult {
  /** Lateness of the first items popped (ms). */
  first: number;
  p50: number;
  p99: number;
  max: number;
  /** Items per second the movers made ready, as the consumer got them: items / (last arrival − due). */
  moverPerSec: number;
  /** Every item popped exactly once, nothing left in the delayed set or the list. */
  movedOnce: boolean;
  /** Raw LPUSH latency (ms) in the second before the due time, and while the movers ran. */
  lpushBefore: { p50: number; p99: number; n: number };
  lpushDuring: { p50: number; p99: number; n: number };
  /** Redis's own time per EVALSHA while the movers ran (promote.lua, µs): the longest any other command waits behind one. */
  scriptUsPerCall: number;
  scriptCalls: number;
}

const here = dirname(fileURLToPath(import.meta.url));

/** The row's set-up: the server processes, a client of each, and the raw consumer (raw-consumer.ts). */
export interface Instances {
  clients: SwitchyardClient[];
  /** Pops a round's items in the consumer's process. */
  consume(req: ConsumeRequest): Promise<Consumed>;
  stop(): Promise<void>;
}

/** The child's next message; fails if it exits first (`when`: what it was doing, for the error). */
function nextMessage(child: ChildProcess, name: string, when: string): Promise<unknown> {
  return new Promise((ok, fail) => {
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => fail(new Error(`${name} exited with ${code ?? signal} ${when}`));
    child.once("exit", onExit);
    child.once("message", (m: unknown) => {
      child.off("exit", onExit);
      ok(m);
    });
  });
}

/** Three (or `n`) server processes on the bench Redis, a client of each, and the raw consumer's process. */
export async function startInstances(redis: BenchRedis, n: number): Promise<Instances> {
  const servers = await Promise.all(Array.from({ length: n }, () => startServer(`unix://${redis.socketPath}`, [])));
  for (const s of servers) leftovers.add(s.child);
  const consumer = fork(join(here, "raw-consumer.js"), [redis.socketPath], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  leftovers.add(consumer);
  await nextMessage(consumer, "raw consumer", "as it started");
  const clients = servers.map((s) => new SwitchyardClient(s.address));
  const exited = (child: ChildProcess) =>
    new Promise<void>((ok) => (child.exitCode !== null || child.signalCode !== null ? ok() : child.once("exit", () => ok())));
  return {
    clients,
    async consume(req) {
      const answer = nextMessage(consumer, "raw consumer", "before answering");
      consumer.send(req);
      const got = (await answer) as Consumed;
      if (got.list !== req.list) throw new Error(`raw consumer answered for ${String(got.list)}, asked for ${req.list}`);
      return got;
    },
    async stop() {
      for (const c of clients) c.close();
      if (consumer.connected) consumer.send("stop");
      const done = [consumer, ...servers.map((s) => s.child)].map(exited);
      for (const s of servers) s.child.kill("SIGTERM");
      await Promise.all(done);
      leftovers.delete(consumer);
      for (const s of servers) leftovers.delete(s.child);
    },
  };
}

/** Milliseconds on Redis's clock from this host's, by the offset measured with TIME (best of 5 round trips). */
async function redisClock(plain: Redis): Promise<() => number> {
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < 5; i++) {
    const before = Date.now();
    const [s, us] = (await plain.time()) as [string | number, string | number];
    const after = Date.now();
    const ref = Number(s) * 1000 + Math.floor(Number(us) / 1000);
    if (after - before < best.rtt) best = { rtt: after - before, offset: ref - (before + after) / 2 };
  }
  return () => Date.now() + best.offset;
}

const summary = (xs: number[]) => ({ p50: percentile(xs, 50), p99: percentile(xs, 99), n: xs.length });

/** One round: a fresh queue, `shape.items` items due at once through every client, moved and popped. */
export async function delayedBurst(redis: BenchRedis, instances: Instances, shape: DelayedShape): Promise<DelayedResult> {
  const { clients } = instances;
  const name = `{${fresh("delayed")}}`;
  await clients[0].createQueue({ name, mode: QueueMode.RELIABLE });
  // Every instance learns the declaration over pub/sub before it is sent items.
  for (const c of clients) await c.getQueue(name);
  await sleep(300);
  const clock = await redisClock(redis.plain);
  const due = clock() + shape.leadMs;
  const notBefore = new Date(due);
  const batch = 1000;
  const payload = Buffer.alloc(100, 120);
  await pool(Math.ceil(shape.items / batch), 3, (i) =>
    clients[i % clients.length].enqueue(name, Array.from({ length: Math.min(batch, shape.items - i * batch) }, () => ({ payload, notBefore }))).then(() => undefined),
  );
  const enqueuedAt = clock();
  if (enqueuedAt >= due - 1000) throw new Error(`delayed: enqueueing took until ${enqueuedAt - due} ms before the due time; raise leadMs`);
  const delayedKey = `${name}.delayed`;
  const waiting = await redis.plain.zcard(delayedKey);
  if (waiting !== shape.items) throw new Error(`delayed: ${waiting} items in the delayed set, expected ${shape.items}`);

  // Redis's command statistics from here on count (almost only) the movers' promote.lua calls.
  await redis.plain.config("RESETSTAT");

  // A raw producer in a process of its own (raw-producer.ts), LPUSH back to back, each timed.
  const producer = fork(join(here, "raw-producer.js"), [redis.socketPath, `bench:raw:${name}`], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  leftovers.add(producer);
  const hostToRedis = clock() - Date.now();
  const produced = new Promise<{ at: number; ms: number }[]>((ok, fail) => {
    producer.on("message", (m: unknown) => {
      if (typeof m === "object" && m && "pushes" in m) ok((m as { pushes: [number, number][] }).pushes.map(([at, ms]) => ({ at: at + hostToRedis, ms })));
    });
    producer.once("exit", (code) => fail(new Error(`raw producer exited with ${code} before sending its pushes`)));
  });
  await nextMessage(producer, "raw producer", "as it started");
  if (clock() >= due - 1000) throw new Error("delayed: the raw producer started less than a second before the due time; raise leadMs");

  // The raw consumer, in its process (raw-consumer.ts): pops what the movers make ready, up to
  // 1000 a call, and notes when (this host's clock, put on Redis's as the producer's pushes are).
  let got: Consumed;
  try {
    got = await instances.consume({ list: name, items: shape.items, deadline: due - hostToRedis + 30_000 });
  } finally {
    producer.send("stop");
  }
  const pushes = await produced;
  leftovers.delete(producer);
  const calls = got.calls.map(([at, n]) => [at + hostToRedis, n] as const);
  const lateness = calls.flatMap(([at, n]) => Array<number>(n).fill(at - due));
  const last = calls.length > 0 ? calls[calls.length - 1][0] : 0;
  const stats = (await redis.plain.info("commandstats")) as string;
  const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
  const seen = new Map<string, number>();
  for (const id of got.ids) seen.set(id, (seen.get(id) ?? 0) + 1);
  const left = (await redis.plain.zcard(delayedKey)) + (await redis.plain.llen(name));
  const movedOnce = lateness.length === shape.items && seen.size === shape.items && [...seen.values()].every((n) => n === 1) && left === 0;
  await clients[0].deleteQueue(name, { purge: true });
  return {
    first: Math.min(...lateness),
    p50: percentile(lateness, 50),
    p99: percentile(lateness, 99),
    max: Math.max(...lateness),
    moverPerSec: (shape.items / Math.max(1, last - due)) * 1000,
    movedOnce,
    lpushBefore: summary(pushes.filter((p) => p.at >= due - 1000 && p.at < due).map((p) => p.ms)),
    lpushDuring: summary(pushes.filter((p) => p.at >= due && p.at <= last).map((p) => p.ms)),
    scriptUsPerCall: Number(evalsha?.[3] ?? NaN),
    scriptCalls: Number(evalsha?.[1] ?? 0),
  };
}

const fmt = (x: number, d = 1) => x.toFixed(d);

/** The row's lines, medians of the rounds, and each round. */
export function delayedTable(results: DelayedResult[], shape: DelayedShape, instances: number): string {
  const med = (f: (r: DelayedResult) => number) => median(results.map(f));
  const each = (f: (r: DelayedResult) => number, d = 1) => results.map((r) => fmt(f(r), d)).join(", ");
  const once = results.every((r) => r.movedOnce);
  return [
    `| row | what (median of ${results.length} rounds) | Switchyard | rounds | target |`,
    "|---|---|---|---|---|",
    `| 12a | ${shape.items.toLocaleString("en-US")} delayed items due at once, ${instances} instances: lateness p50 / p99 / max (ms) | ${fmt(med((r) => r.p50))} / ${fmt(med((r) => r.p99))} / ${fmt(med((r) => r.max))} | p99 ${each((r) => r.p99)} | p99 ≤ 50 ms |`,
    `| 12b | … movers' rate (items / (last moved − due)) | ${Math.round(med((r) => r.moverPerSec)).toLocaleString("en-US")}/s | ${each((r) => r.moverPerSec, 0)} | ≥ 50,000/s |`,
    `| 12c | … each moved exactly once | ${once ? "yes" : "NO"} | ${results.map((r) => (r.movedOnce ? "yes" : "no")).join(", ")} | every round |`,
    `| 10e | … Redis time per mover call (promote.lua, EVALSHA µs per call; the most another command waits behind one) | ${fmt(med((r) => r.scriptUsPerCall), 0)} µs (${fmt(med((r) => r.scriptCalls), 0)} calls) | ${each((r) => r.scriptUsPerCall, 0)} | (report) |`,
    `| 10d | … a raw LPUSH producer meanwhile: p50 / p99 (ms), the second before → while moving | ${fmt(med((r) => r.lpushBefore.p50), 2)} / ${fmt(med((r) => r.lpushBefore.p99), 2)} → ${fmt(med((r) => r.lpushDuring.p50), 2)} / ${fmt(med((r) => r.lpushDuring.p99), 2)} | during p99 ${each((r) => r.lpushDuring.p99, 2)} (n ${results.map((r) => r.lpushDuring.n).join(", ")}) | unaffected |`,
  ].join("\n");
}

async function main(): Promise<void> {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : undefined;
  };
  const rounds = Number(arg("rounds") ?? 3);
  const instances = 3;
  const shape: DelayedShape = { items: Number(arg("items") ?? 10_000), leadMs: 3000 };
  const redis = await startBenchRedis();
  leftovers.add(redis.server.process);
  const servers = await startInstances(redis, instances);
  const results: DelayedResult[] = [];
  try {
    const warm = await delayedBurst(redis, servers, shape); // not recorded, as in npm run bench
    log(`row 12 warm-up: lateness p99 ${fmt(warm.p99)} ms; moved once: ${warm.movedOnce}`);
    if (!warm.movedOnce) process.exitCode = 1;
    for (let round = 1; round <= rounds; round++) {
      const r = await delayedBurst(redis, servers, shape);
      log(`row 12 round ${round}: lateness first ${fmt(r.first)} p50 ${fmt(r.p50)} p99 ${fmt(r.p99)} max ${fmt(r.max)} ms; ${Math.round(r.moverPerSec)} items/s; moved once: ${r.movedOnce}; ` +
        `LPUSH p99 ${fmt(r.lpushBefore.p99, 2)} → ${fmt(r.lpushDuring.p99, 2)} ms; EVALSHA ${r.scriptCalls} calls, ${fmt(r.scriptUsPerCall)} µs each`);
      results.push(r);
    }
  } finally {
    await servers.stop();
    await redis.stop();
  }
  process.stdout.write(delayedTable(results, shape, instances) + "\n");
  if (!results.every((r) => r.movedOnce)) process.exitCode = 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((err: unknown) => {
    for (const p of leftovers) p.kill("SIGKILL");
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
