// Diagnostic: what the latency rows' two scripts cost Redis per item, counted in instructions. On a
// redis-server of its own under `valgrind --tool=callgrind` (collecting inside EVAL/EVALSHA only), it
// runs ITEMS items one after the other as a paced item goes on a reliable queue with a recovery set:
// push-lease.lua with one ~100-byte value (pushAndLease, as an Enqueue onto a queue with a waiting
// stream), then settle.lua acking its delivery (settleItems). The counts of each phase are dumped
// apart (`callgrind_control`), so it prints instructions per push-lease call and per ack. An
// instruction count is repeatable where time on this shared machine is not; it leaves out the cold
// caches a paced item meets (see "A sleeping process's cache is gone" in bench/README.md).
//   node bench/diagnostics/item-script-cost.mjs [ITEMS]   (after npm run build; needs valgrind)
// It measures the scripts of the build in dist/: to compare a change, run it in a worktree of each.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { BulkStrings } from "../../dist/redis/bulk-strings.js";
import { defineScripts, pushAndLease, settleItems } from "../../dist/redis/scripts.js";

const items = Number(process.argv[2] ?? 1000);
const dir = mkdtempSync(join(tmpdir(), "item-script-cost-"));
const sock = join(dir, "s.sock");
const out = join(dir, "callgrind.out");
const child = spawn("valgrind", ["--tool=callgrind", "--toggle-collect=evalGenericCommand", `--callgrind-out-file=${out}`,
  "redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"], { stdio: "ignore" });
const exited = new Promise((resolve) => child.on("exit", resolve));
try {
  for (let i = 0; i < 6000 && !existsSync(sock); i++) await new Promise((r) => setTimeout(r, 20));
  const client = new Redis({ path: sock, retryStrategy: () => 50 }).on("error", () => undefined);
  defineScripts(client);
  const q = "{lat}";
  const keys = {
    queue: q, processing: `${q}.processing`, deadLetter: `${q}.dead`, recovery: `${q}.claims`, leases: `${q}.leases`,
    fence: `${q}.fence`, delayed: `${q}.delayed`, returned: `${q}.returned`, idempotency: `${q}.idem`, idempotencyTime: `${q}.idemt`,
  };
  const owner = "bench00001";
  const ctx = { now: Date.now(), maxDeliveries: 0, retryPolicy: "1000,2,60000,0.1", publishTtlMs: 0 };
  const framed = (i) => {
    const v = JSON.stringify({ seq: i, t: 1_000_000 + i, pad: "x".repeat(60) });
    return new BulkStrings(Buffer.from(`$${Buffer.byteLength(v)}\r\n${v}\r\n`), 1);
  };
  // One unmeasured item loads both scripts (NOSCRIPT, then EVAL) and runs their code once.
  const once = async (i) => {
    const { leased } = await pushAndLease(client, keys, 0, [framed(i)], { now: ctx.now, max: 10, recoveryTtlMs: 0, owner });
    if (!Array.isArray(leased) || leased.length !== 1) throw new Error(`item ${i} was not leased with its push: ${leased}`);
    return `${leased[0].fence}@${owner}`;
  };
  const ack = async (delivery) => {
    const [r] = await settleItems(client, keys, ctx, [{ action: "ack", delivery }]);
    if (r.code !== "done") throw new Error(`the ack of ${delivery} was ${r.code}`);
  };
  await ack(await once(0));
  const control = (flag) => execFileSync("callgrind_control", [flag, String(child.pid)], { stdio: "ignore" });
  control("-z");
  const deliveries = [];
  for (let i = 1; i <= items; i++) deliveries.push(await once(i));
  control("-d");
  for (const d of deliveries) await ack(d);
  control("-d");
  if ((await client.llen(keys.processing)) !== 0 || (await client.hget(keys.leases, "live")) !== "0") throw new Error("items left held");
  await client.shutdown("NOSAVE").catch(() => undefined);
  client.disconnect();
  await exited;
  const dumps = readdirSync(dir).filter((f) => /^callgrind\.out\.\d+$/.test(f)).sort((a, b) => Number(a.split(".").at(-1)) - Number(b.split(".").at(-1)));
  const totals = dumps.map((f) => Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, f), "utf8"))[1]));
  const [leases, acks] = totals.slice(-2);
  console.log(`${items} items: push-lease.lua ${Math.round(leases / items).toLocaleString("en-US")} instructions a call, settle.lua (one ack) ${Math.round(acks / items).toLocaleString("en-US")}`);
} finally {
  child.kill();
  rmSync(dir, { recursive: true, force: true });
}
