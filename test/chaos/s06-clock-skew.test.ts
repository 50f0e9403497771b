/**
 * Scenario 6: two instances whose clocks are ±30 s apart. Must hold: no early
 * recovery (an item is recovered min_idle after its claim, by the shared clock,
 * whichever instance claimed it and whichever runs the watchdog), and each
 * cron tick runs once.
 *
 * Two ways:
 *  1. Real processes. Each server is `node --import test/chaos/skew-preload.mjs
 *     dist/main.js` with its wall clock (Date) shifted by +30 s or -30 s, as a
 *     host with a wrong clock: no fake clock is shared, each process corrects
 *     its own against Redis's TIME (SyncedClock), as in production. (The host
 *     clock itself cannot be changed here: no CAP_SYS_TIME, no libfaketime.)
 *  2. In process, on a shared ManualClock (as test/cron/scheduler.test.ts):
 *     SyncedClock(SkewedClock(base, ±30 s)), which lets min_idle be the 60 s a
 *     real deployment would use; plus a control instance whose skewed clock is
 *     NOT corrected, which must recover early, to show the check can fail.
 */
import { afterAll, it } from "vitest";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SwitchyardClient } from "../../src/client/client.js";
import { ExecutePolicy } from "../../src/gen/switchyard/v1/cron_pb.js";
import { ManualClock, SkewedClock, SyncedClock, type Clock } from "../../src/clock.js";
import { startApp, type App } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createLogger } from "../../src/log.js";
import { Scenario, readQueue } from "./harness/ledger.js";
import { ROOT, killStarted, sleep, startChaosRedis, startServer, until, type ChaosRedis } from "./harness/procs.js";
import { allJobLogs, declareReliable } from "./harness/grpc.js";

const SKEW_MS = 30_000;
const s = new Scenario("06", "clocks ±30 s apart");
const cleanup: (() => unknown)[] = [];
afterAll(async () => {
  killStarted();
  for (const fn of cleanup.reverse()) await fn();
});

/** The wall-clock time a server process logged its first line with. */
function firstLogTime(file: string): number {
  const line = readFileSync(file, "utf8").split("\n").find((l) => l.startsWith("{"));
  const t = line ? (JSON.parse(line) as { time?: string | number }).time : undefined;
  return typeof t === "number" ? t : t ? Date.parse(t) : NaN;
}

it("real processes with clocks +30 s and -30 s: no early recovery, each cron tick runs once", async () => {
  await s.run(async () => {
    const redis: ChaosRedis = await startChaosRedis({ aof: true });
    cleanup.push(() => redis.stop());
    const preload = ["--import", join(ROOT, "test", "chaos", "skew-preload.mjs")];
    const env = (skew: number) => ({ CHAOS_CLOCK_SKEW_MS: String(skew), SWITCHYARD_WATCHDOG_INTERVAL: "200ms", SWITCHYARD_LOG_LEVEL: "info" });
    const startedAt = Date.now();
    const [a, b] = await Promise.all([
      startServer("s06-ahead", redis, { nodeArgs: preload, env: env(SKEW_MS) }),
      startServer("s06-behind", redis, { nodeArgs: preload, env: env(-SKEW_MS) }),
    ]);
    const seen = [firstLogTime(a.logFile) - startedAt, firstLogTime(b.logFile) - startedAt];
    s.check("the processes' own clocks are 30 s ahead and 30 s behind (their log times)", seen[0] > SKEW_MS - 5000 && seen[1] < -SKEW_MS + 5000, seen);
    const toA = new SwitchyardClient(a.address);
    const toB = new SwitchyardClient(b.address);
    cleanup.push(() => (toA.close(), toB.close()));

    // Recovery: one item claimed through each instance; both watchdogs run every 200 ms.
    const q = "{s06}";
    const minIdleMs = 4000;
    await declareReliable(toA, q, { minIdleMs });
    await s.ledger.enqueue(toA, q, ["x", "y"]);
    const sessions = [toA.lease(q, 1), toB.lease(q, 1)];
    cleanup.push(() => sessions.forEach((x) => x.cancel()));
    const [x] = await sessions[0].take(1);
    const leasedX = Date.now();
    const [y] = await sessions[1].take(1);
    const leasedY = Date.now();
    s.ledger.delivered("via-ahead", x);
    s.ledger.delivered("via-behind", y);
    const claims = await redis.plain.zrange(`${q}.claims`, 0, -1, "WITHSCORES");
    const scores = [Number(claims[1]), Number(claims[3])];
    s.check("claims are recorded on the shared (Redis) clock, within 1 s of real time", scores.every((t) => Math.abs(t - leasedY) < 1000), {
      offsets: scores.map((t) => t - leasedY),
    });
    const recoveredAt: Record<string, number> = {};
    await until(
      async () => {
        const queued = (await readQueue(redis.plain, q)).queue;
        for (const id of queued) recoveredAt[id] ??= Date.now();
        return queued.length === 2;
      },
      minIdleMs + 5000,
      25,
    );
    const idle = { x: (recoveredAt[x.id] ?? Infinity) - leasedX, y: (recoveredAt[y.id] ?? Infinity) - leasedY };
    s.check(`no early recovery: both items are recovered no sooner than min_idle (${minIdleMs} ms)`, idle.x >= minIdleMs - 100 && idle.y >= minIdleMs - 100, idle);
    s.check("both are recovered within min_idle + 2 s", idle.x <= minIdleMs + 2000 && idle.y <= minIdleMs + 2000, idle);
    s.recoveryMs = Math.max(idle.x, idle.y);

    // Cron: one run per tick, at the tick's real time.
    const job = await toA.createJob({ name: "skewed", target: "HelloWorld", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await toB.resumeJob(job.id);
    const mounted = await until(async () => (await toA.getSchedulerStatus()).instances.filter((i) => i.mountedJobIds.includes(job.id)).length === 2, 3000, 50);
    s.check("both instances mount the job", mounted);
    const windowStart = Math.ceil((Date.now() + 500) / 1000) * 1000;
    const windowEnd = windowStart + 8000;
    await sleep(windowEnd + 1200 - Date.now());
    await toA.pauseJob(job.id);
    const all = await allJobLogs(toA, job.id);
    const logs = all.filter((l) => l.tickMs >= windowStart && l.tickMs < windowEnd);
    const ticks = logs.map((l) => l.tickMs);
    const byInstance: Record<string, number> = {};
    for (const l of logs) byInstance[l.instanceId] = (byInstance[l.instanceId] ?? 0) + 1;
    s.check("8 ± 1 runs in an 8 s window", Math.abs(logs.length - 8) <= 1, { runs: logs.length, byInstance });
    s.check("each tick runs once", new Set(ticks).size === ticks.length, ticks);
    s.check("no tick is ever stamped 30 s off real time", all.every((l) => l.tickMs > startedAt - 5000 && l.tickMs < Date.now() + 1000));
    const late = logs.map((l) => (l.startTime ? Number(l.startTime.seconds) * 1000 + l.startTime.nanos / 1e6 : 0) - l.tickMs);
    s.check("each run starts within 1 s of its tick", late.every((ms) => ms >= 0 && ms < 1000), late);
    s.lost = 8 - new Set(ticks).size;
    s.duplicates = ticks.length - new Set(ticks).size;
    s.figures.realProcesses = { idle, runs: logs.length, byInstance, claimOffsets: scores.map((t) => t - leasedY) };
    s.note(`real processes ±30 s: recovered after ${idle.x}/${idle.y} ms (min_idle ${minIdleMs}); ${logs.length} runs in 8 s by ${JSON.stringify(byInstance)}`);
  });
});

it("in process, on a shared manual clock with min_idle 60 s: no early recovery; an uncorrected clock would recover early", async () => {
  const s2 = new Scenario("06b", "clocks ±30 s, shared manual clock");
  await s2.run(async () => {
    const redis: ChaosRedis = await startChaosRedis({ aof: true });
    cleanup.push(() => redis.stop());
    const base = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 0));
    const apps: App[] = [];
    const start = async (clock: Clock) => {
      const config = loadConfig({
        SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
        SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0",
        SWITCHYARD_LOG_LEVEL: "error",
        SWITCHYARD_AUTH: "off",
        SWITCHYARD_REDIS_URL: redis.url,
      });
      const app = await startApp({ ...config, shutdownGraceMs: 200 }, { clock, log: createLogger("error") });
      apps.push(app);
      cleanup.push(() => app.stop());
      return { app, client: new SwitchyardClient(app.address) };
    };
    const synced = async (skew: number) => {
      const clock = new SyncedClock(new SkewedClock(base, skew));
      await clock.sync(async () => base.now());
      return start(clock);
    };
    const advance = async (ms: number) => {
      for (let done = 0; done < ms; done += 500) await base.advance(Math.min(500, ms - done));
    };
    const [ahead, behind] = [await synced(SKEW_MS), await synced(-SKEW_MS)];
    cleanup.push(() => (ahead.client.close(), behind.client.close()));
    const q = "{s06m}";
    await declareReliable(ahead.client, q, { minIdleMs: 60_000 });
    await s2.ledger.enqueue(behind.client, q, ["m"]);
    const lease = behind.client.lease(q, 1);
    cleanup.push(() => lease.cancel());
    const [m] = await lease.take(1);
    s2.ledger.delivered("via-behind", m);
    await advance(59_000);
    const at59 = await readQueue(redis.plain, q);
    s2.check("59 s after the claim the item is still held (no early recovery by the +30 s instance)", at59.processing.includes(m.id), at59);
    await advance(2500);
    const at61 = await readQueue(redis.plain, q);
    s2.check("61.5 s after the claim it is recovered", at61.queue.includes(m.id), at61);

    // Control: an instance whose +30 s clock is not corrected recovers a claim after 30 s.
    await Promise.all(apps.splice(0).map((app) => app.stop()));
    const correct = await synced(0);
    const uncorrected = await start(new SkewedClock(base, SKEW_MS));
    cleanup.push(() => (correct.client.close(), uncorrected.client.close()));
    const qc = "{s06c}";
    await declareReliable(correct.client, qc, { minIdleMs: 60_000 });
    await s2.ledger.enqueue(correct.client, qc, ["c"]);
    const lease2 = correct.client.lease(qc, 1);
    cleanup.push(() => lease2.cancel());
    await lease2.take(1);
    await advance(31_000);
    const control = await readQueue(redis.plain, qc);
    s2.check("control: the uncorrected +30 s clock recovers the claim after only 31 s (the check would catch it)", control.queue.length === 1, control);
    s2.note("min_idle 60 s: held at 59 s, recovered by 61.5 s; an uncorrected clock recovers at 31 s (control)");
  });
});
