/**
 * Row 8: the watchdog recovering 100,000 stale claims. A dedicated instance
 * (its own namespace, its periodic watchdog and heartbeat checks pushed out of
 * the way) leases real items through real Lease streams and holds them; once
 * min_idle (1 s) has passed on the real clock, one watchdog pass is timed
 * while another client sends PING and GET back to back and times each.
 */
import { Redis } from "ioredis";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../dist/client/client.js";
import { startBenchApp } from "./env.js";
import { PAYLOAD, fresh, type Ctx } from "./throughput.js";
import { log, now, percentile, pool, sleep, within } from "./lib.js";

export interface WatchdogShape {
  claims: number;
  streams: number;
  /** Diagnostic: print Redis SLOWLOG entries (≥ 1 ms) of the timed pass, and the script's cost per call. */
  slowlog?: boolean;
}

export interface WatchdogResult {
  itemsPerSec: number;
  othersP99: number;
  othersP50: number;
  baselineP99: number;
  passMs: number;
}

/** Times PING/GET round trips on their own connection until stopped (at most `maxMs`). */
function prober(socketPath: string, maxMs: number) {
  const other = new Redis({ path: socketPath });
  const lat: number[] = [];
  let stop = false;
  const done = (async () => {
    await other.set("bench:probe", "x");
    const end = now() + maxMs;
    while (!stop && now() < end) {
      let t = now();
      await other.ping();
      lat.push(now() - t);
      t = now();
      await other.get("bench:probe");
      lat.push(now() - t);
    }
  })();
  return {
    lat,
    async finish() {
      stop = true;
      await done;
      other.disconnect();
    },
  };
}

export async function watchdogRecovery(ctx: Ctx, shape: WatchdogShape): Promise<WatchdogResult> {
  const sy = await startBenchApp(ctx.redis.socketPath, {
    config: { namespace: "bench-wd", watchdogIntervalMs: 3_600_000, heartbeatIntervalMs: 3_600_000 },
  });
  const sessions: LeaseSession[] = [];
  const name = `{${fresh("wd")}}`;
  try {
    await sy.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 1n } });
    const batch = Array.from({ length: 1000 }, () => PAYLOAD);
    await pool(shape.claims / 1000, 4, () => sy.client.enqueue(name, batch));
    const credit = shape.claims / shape.streams;
    for (let i = 0; i < shape.streams; i++) sessions.push(sy.client.lease(name, credit));
    await within(Promise.all(sessions.map((s) => s.take(credit))), 120_000, "every item to be leased");
    const leasedAt = now();
    const claims = await ctx.redis.plain.zcard(`${name}.claims`);
    if (claims !== shape.claims) throw new Error(`watchdog: ${claims} claims, expected ${shape.claims}`);
    // Others' latency with nothing else going on, then wait out min_idle.
    const base = prober(ctx.redis.socketPath, 1000);
    await sleep(1000);
    await base.finish();
    await sleep(Math.max(0, leasedAt + 1300 - now()));
    if (shape.slowlog) {
      await ctx.redis.plain.config("SET", "slowlog-log-slower-than", "1000");
      await ctx.redis.plain.slowlog("RESET");
      await ctx.redis.plain.config("RESETSTAT");
    }
    const probe = prober(ctx.redis.socketPath, 120_000);
    const t0 = now();
    const pass = await sy.app.queues.watchdog.pass();
    const passMs = now() - t0;
    await probe.finish();
    if (shape.slowlog) {
      const slow = (await ctx.redis.plain.slowlog("GET", 256)) as [number, number, number, unknown[]][];
      const ms = slow.map(([, , us]) => us / 1000).sort((a, b) => a - b);
      const stats = (await ctx.redis.plain.info("commandstats")) as string;
      const evalsha = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
      log(
        `watchdog pass: ${slow.length} commands ≥ 1 ms in SLOWLOG; median ${ms[Math.floor(ms.length / 2)]?.toFixed(1)} ms, ` +
          `max ${ms[ms.length - 1]?.toFixed(1)} ms; EVALSHA during the pass: ${evalsha?.[1]} calls, ${evalsha?.[3]} µs per call`,
      );
    }
    if (pass.recovered !== shape.claims) throw new Error(`watchdog recovered ${pass.recovered} of ${shape.claims}`);
    const ready = await ctx.redis.plain.llen(name);
    if (ready !== shape.claims) throw new Error(`watchdog: ${ready} items back in the queue, expected ${shape.claims}`);
    return {
      itemsPerSec: (pass.recovered / passMs) * 1000,
      othersP99: percentile(probe.lat, 99),
      othersP50: percentile(probe.lat, 50),
      baselineP99: percentile(base.lat, 99),
      passMs,
    };
  } finally {
    for (const s of sessions) s.cancel();
    await sleep(200);
    await sy.client.deleteQueue(name, { purge: true }).catch(() => undefined);
    await sy.stop();
  }
}
