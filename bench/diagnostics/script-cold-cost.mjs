// Diagnostic: what a paced item's scripts cost Redis in time, cold, as the latency rows meet them. On a
// bench Redis of its own (unix socket), each case runs CALLS times GAP ms apart (Redis sleeps between
// them, as it does between items at 100/s), and Redis's SLOWLOG (threshold 0) gives each command's run
// time inside Redis, the Lua around a script's commands included; the figure is the median per round,
// over ROUNDS rounds whose order of cases rotates. The cases:
//   push-lease.lua with one ~100-byte value onto a reliable queue with a recovery set, and without one
//   (pushAndLease, as an Enqueue onto a queue with a waiting stream), each followed 1 ms later by the
//   settle.lua that acks it (settleItems); a plain LPUSH (then an RPOP); and a ladder of scripts made
//   here: `return 1`, one TYPE, five TYPEs (one command five times), five commands of five kinds, and
//   the ten calls of push-lease.lua's nine kinds inline (the parts of a script's cold cost).
// item-script-cost.mjs counts the same scripts in instructions, which leaves the cold caches out.
//   node bench/diagnostics/script-cold-cost.mjs [CALLS] [GAP_MS] [ROUNDS]   (after npm run bench built dist-bench/)
import { Redis } from "ioredis";
import { BulkStrings } from "../../dist/redis/bulk-strings.js";
import { queueKeys } from "../../dist/redis/keys.js";
import { defineScripts, pushAndLease, settleItems } from "../../dist/redis/scripts.js";
import { startBenchRedis } from "../../dist-bench/env.js";
import { sleep } from "../../dist-bench/lib.js";

const calls = Number(process.argv[2] ?? 200), gap = Number(process.argv[3] ?? 10), rounds = Number(process.argv[4] ?? 3);
const redis = await startBenchRedis();
const client = new Redis({ path: redis.socketPath });
try {
  defineScripts(client);
  await client.config("SET", "slowlog-log-slower-than", "0");
  await client.config("SET", "slowlog-max-len", String(calls * 25));
  const owner = "bench00001";
  const ctx = { now: Date.now(), maxDeliveries: 0, retryPolicy: "1000,2,60000,0.1", publishTtlMs: 0 };
  let seq = 0;
  const value = () => JSON.stringify({ seq: seq++, t: 1_000_000 + seq, pad: "x".repeat(60) });
  const framed = (v) => new BulkStrings(Buffer.from(`$${Buffer.byteLength(v)}\r\n${v}\r\n`), 1);
  /** A push-lease and, 1 ms later, the ack of what it leased. */
  const pushLease = (keys) => async () => {
    const { leased } = await pushAndLease(client, keys, 0, [framed(value())], { now: Date.now(), max: 10, recoveryTtlMs: 0, owner });
    if (!Array.isArray(leased) || leased.length !== 1) throw new Error(`the push-lease leased ${leased}`);
    await sleep(1);
    const [r] = await settleItems(client, keys, ctx, [{ action: "ack", delivery: `${leased[0].fence}@${owner}` }]);
    if (r.code !== "done") throw new Error(`the ack was ${r.code}`);
  };
  const ladder = {
    "return 1": "return 1",
    "one TYPE": "return redis.call('TYPE', KEYS[1]).ok",
    "five TYPEs": "for i = 1, 5 do redis.call('TYPE', KEYS[1]) end return 1",
    "five commands, five kinds": `redis.call('LPUSH', KEYS[1], ARGV[1]) redis.call('INCRBY', KEYS[2], 1)
      local v = redis.call('LMOVE', KEYS[1], KEYS[3], 'RIGHT', 'LEFT') redis.call('HSET', KEYS[4], 'f', v)
      redis.call('HINCRBY', KEYS[4], 'live', 1) return 1`,
    "ten calls of push-lease.lua's nine kinds, inline": `redis.call('LPUSH', KEYS[1], ARGV[1]) redis.call('TYPE', KEYS[4]) redis.call('TYPE', KEYS[5])
      redis.call('INCRBY', KEYS[2], 1) local v = redis.call('LMOVE', KEYS[1], KEYS[3], 'RIGHT', 'LEFT') local s = redis.sha1hex(v)
      redis.call('HSETNX', KEYS[4], 'm:' .. s, 'x') redis.call('HINCRBY', KEYS[4], 'n:' .. s, 1) redis.call('ZADD', KEYS[5], 1, 'c:' .. v)
      redis.call('HSET', KEYS[4], 'f', v) redis.call('HINCRBY', KEYS[4], 'live', 1) return 1`,
  };
  const scratch = ["{ladder}", "{ladder}.f", "{ladder}.p", "{ladder}.h", "{ladder}.z"];
  /** The cases that run the product's own scripts: each logs its push-lease and its ack. */
  const scripted = {
    "push-lease.lua, recovery set": pushLease(queueKeys("{rec}", "{rec}.p", "{rec}.d", "{rec}.c")),
    "push-lease.lua, no recovery set": pushLease(queueKeys("{plain}", "{plain}.p", "{plain}.d", "")),
  };
  const cases = {
    ...scripted,
    LPUSH: async () => {
      await client.lpush("{list}", value());
      await sleep(1);
      await client.rpop("{list}");
    },
  };
  for (const [name, lua] of Object.entries(ladder)) {
    const sha = await client.script("LOAD", lua);
    cases[name] = async () => {
      await client.evalsha(sha, scratch.length, ...scratch, value());
      await sleep(1);
      await client.del(...scratch);
    };
  }
  /** What a SLOWLOG entry of case `name` ran, as the results name it (undefined: a command left out). */
  const label = (name, args) => {
    const [command, , keys] = args.map(String);
    if (name === "LPUSH") return command.toUpperCase() === "LPUSH" ? name : undefined;
    if (command.toLowerCase() !== "evalsha") return undefined; // a script's own commands are logged too
    if (!(name in scripted)) return name;
    return `${name}: ${keys === "8" ? "settle.lua (the ack)" : "push-lease.lua"}`;
  };
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const results = new Map();
  const names = Object.keys(cases);
  for (const run of Object.values(cases)) for (let i = 0; i < 20; i++) await run(); // loads the scripts, warms the paths once
  for (let round = 0; round < rounds; round++) {
    for (const name of [...names.slice(round % names.length), ...names.slice(0, round % names.length)]) {
      await client.slowlog("RESET");
      for (let i = 0; i < calls; i++) {
        await cases[name]();
        await sleep(gap);
      }
      const byLabel = new Map();
      for (const [, , us, args] of await client.slowlog("GET", calls * 25)) {
        const l = label(name, args);
        if (l) byLabel.set(l, [...(byLabel.get(l) ?? []), us]);
      }
      for (const [l, us] of byLabel) results.set(l, [...(results.get(l) ?? []), median(us)]);
    }
  }
  console.log(`Redis's time per call (SLOWLOG), median µs per round: ${calls} calls ${gap} ms apart, an ack or clean-up 1 ms after each; ${rounds} rounds`);
  for (const [l, us] of results) console.log(`  ${l.padEnd(62)} ${us.join(" / ")}`);
} finally {
  client.disconnect();
  await redis.stop();
}
