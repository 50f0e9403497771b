// Diagnostic: what recover.lua costs a stale claim, apart from the rest of row 8. Builds row 8's
// state once (100,000 items leased through 10 real Lease streams and left stale) and saves it as an
// RDB file; then, for each round and each variant, starts a redis-server on that file and calls
// recover.lua as the watchdog does (50 claims a call, one call after the other) until no claim is
// left, and prints the Redis time per claim (INFO commandstats) and the final dataset's DEBUG
// DIGEST, which is the same for variants that write the same bytes. With --callgrind, each
// redis-server runs under `valgrind --tool=callgrind`, collecting inside EVAL/EVALSHA only: its
// instruction count is repeatable where the time on a shared machine is not (~70 s a variant).
//   node bench/diagnostics/recover-cost.mjs [--rounds N] [--callgrind] [DIR ...]
// A DIR holds a variant's lib.lua and recover.lua (default: dist/redis/scripts, as built).
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { startBenchApp } from "../../dist-bench/env.js";
import { QueueMode } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { keysOf } from "../../dist/queue/declaration.js";
import { policyArg } from "../../dist/redis/scripts.js";

const argv = process.argv.slice(2);
const rounds = argv.includes("--rounds") ? Number(argv[argv.indexOf("--rounds") + 1]) : 3;
const callgrind = argv.includes("--callgrind");
const dirs = argv.filter((a, i) => !a.startsWith("--") && argv[i - 1] !== "--rounds");
if (!dirs.length) dirs.push(new URL("../../dist/redis/scripts", import.meta.url).pathname);
const CLAIMS = 100_000, STREAMS = 10, CHUNK = 50;
const work = mkdtempSync(join(tmpdir(), "recover-cost-"));

/** A redis-server on a unix socket in `dir` (loading dir/dump.rdb when there), and a client once it has loaded. */
async function server(dir, wrap = []) {
  const sock = join(dir, "s.sock");
  const args = ["--port", "0", "--unixsocket", sock, "--dir", dir, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no", "--enable-debug-command", "yes"];
  const child = spawn(wrap[0] ?? "redis-server", [...wrap.slice(1), ...(wrap.length ? ["redis-server"] : []), ...args], { stdio: "ignore" });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  for (let i = 0; i < 6000 && !existsSync(sock); i++) await new Promise((r) => setTimeout(r, 20));
  const client = new Redis({ path: sock, retryStrategy: () => 50 }).on("error", () => undefined);
  while (!(await client.info("persistence").catch(() => "")).includes("loading:0")) await new Promise((r) => setTimeout(r, 50));
  return { client, exited, pid: child.pid };
}

/** Row 8's state, saved as work/state.rdb; resolves to recover.lua's keys and arguments for it. */
async function buildState() {
  const { client, exited } = await server(work);
  const sy = await startBenchApp(join(work, "s.sock"), { config: { namespace: "bench-wd", watchdogIntervalMs: 3_600_000, heartbeatIntervalMs: 3_600_000, logLevel: "error" } });
  const name = "{wd}";
  await sy.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 1n } });
  const batch = Array.from({ length: 1000 }, () => Buffer.from(JSON.stringify({ n: 1, pad: "x".repeat(80) })));
  for (let i = 0; i < CLAIMS / 1000; i++) await sy.client.enqueue(name, batch);
  const sessions = Array.from({ length: STREAMS }, () => sy.client.lease(name, CLAIMS / STREAMS));
  await Promise.all(sessions.map((s) => s.take(CLAIMS / STREAMS)));
  const config = sy.app.queues.watchdog.host.queues().find((c) => c.name === name);
  const k = keysOf(config);
  const call = {
    now: Date.now() + 3_600_000, // every claim is stale then; the same for every variant
    keys: [k.queue, k.processing, k.leases, k.recovery, k.deadLetter, k.delayed, k.returned],
    args: [config.minIdleMs, CHUNK, config.maxDeliveries, policyArg(config.retryPolicy), 0.5, "not settled within min_idle: recovered by the watchdog", config.publishTtlMs],
  };
  await client.save();
  copyFileSync(join(work, "dump.rdb"), join(work, "state.rdb"));
  for (const s of sessions) s.cancel();
  await sy.stop();
  await client.shutdown("NOSAVE").catch(() => undefined);
  client.disconnect();
  await exited;
  return call;
}

async function recoverAll(dir, call, round) {
  const run = mkdtempSync(join(work, "run-"));
  copyFileSync(join(work, "state.rdb"), join(run, "dump.rdb"));
  const out = join(run, "callgrind.out");
  const { client, exited } = await server(run, callgrind ? ["valgrind", "--tool=callgrind", "--toggle-collect=evalGenericCommand", `--callgrind-out-file=${out}`] : []);
  const sha = await client.script("LOAD", `${readFileSync(join(dir, "lib.lua"), "utf8")}\n${readFileSync(join(dir, "recover.lua"), "utf8")}`);
  await client.config("RESETSTAT");
  let recovered = 0, calls = 0;
  for (;;) {
    const [n, , seen] = await client.evalsha(sha, call.keys.length, ...call.keys, call.now, ...call.args);
    recovered += n;
    calls++;
    if (seen < CHUNK) break;
  }
  const usec = Number(/cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(await client.info("commandstats"))[1]);
  const digest = await client.call("DEBUG", "DIGEST");
  await client.shutdown("NOSAVE").catch(() => undefined);
  client.disconnect();
  await exited;
  const instructions = callgrind ? Number(/^totals: (\d+)/m.exec(readFileSync(out, "utf8"))[1]) : undefined;
  rmSync(run, { recursive: true, force: true });
  console.log(
    `round ${round} ${dir}: ${recovered} recovered in ${calls} calls, ${(usec / recovered).toFixed(2)} µs a claim in Redis` +
      `${instructions ? `, ${Math.round(instructions / recovered).toLocaleString("en-US")} instructions a claim` : ""}, digest ${String(digest).slice(0, 12)}`,
  );
  return usec / recovered;
}

try {
  const call = await buildState();
  const times = new Map(dirs.map((d) => [d, []]));
  for (let r = 1; r <= rounds; r++) for (const d of dirs) times.get(d).push(await recoverAll(d, call, r));
  for (const [d, t] of times) console.log(`${d}: median ${[...t].sort((a, b) => a - b)[Math.floor(t.length / 2)].toFixed(2)} µs a claim (${t.map((x) => x.toFixed(2)).join(", ")})`);
} finally {
  for (const f of readdirSync(work)) rmSync(join(work, f), { recursive: true, force: true });
  rmSync(work, { recursive: true, force: true });
}
