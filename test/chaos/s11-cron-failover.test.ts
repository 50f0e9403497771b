/**
 * Scenario 11: three instances, a cron job every second, one instance
 * SIGKILLed midway (the one that ran the latest tick, so the work must move). Must hold: one run per tick (W ± 1 runs over a W-second
 * window), never two runs for one tick.
 *
 * The issue asks for 60 s; every scenario must also stop by itself in under a
 * minute, so the window is 40 s by default (CHAOS_CRON_SECONDS=60 runs the full
 * minute, with a longer timeout). The 19 s beyond the window are for starting
 * three servers, mounting, aligning to a second and reading the logs, which on
 * a loaded machine took more than the 9 s this scenario once had.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { ExecutePolicy, JobRunStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { Scenario } from "./harness/ledger.js";
import { killStarted, sleep, startChaosRedis, startServer, until, type ChaosRedis } from "./harness/procs.js";
import { allJobLogs } from "./harness/grpc.js";

const WINDOW_S = Number(process.env.CHAOS_CRON_SECONDS ?? 40);
const cleanup: (() => unknown)[] = [];
afterAll(async () => {
  killStarted();
  for (const fn of cleanup.reverse()) await fn();
});

it(`three instances run a 1 s cron job once per tick for ${WINDOW_S} s while one is SIGKILLed midway`, { timeout: (WINDOW_S + 19) * 1000 }, async () => {
  const s = new Scenario("11", `cron every 1 s on 3 instances, ${WINDOW_S} s, one SIGKILLed`);
  await s.run(async () => {
    const redis: ChaosRedis = await startChaosRedis({ aof: true });
    cleanup.push(() => redis.stop());
    const servers = await Promise.all(["s11-A", "s11-B", "s11-C"].map((n) => startServer(n, redis)));
    const clients = servers.map((x) => new SwitchyardClient(x.address));
    cleanup.push(() => clients.forEach((c) => c.close()));
    const job = await clients[0].createJob({ name: "every second", target: "HelloWorld", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await clients[1].resumeJob(job.id);
    const mounted = await until(async () => {
      const st = await clients[2].getSchedulerStatus();
      return st.instances.filter((i) => i.mountedJobIds.includes(job.id)).length === 3;
    }, 3000, 50);
    s.check("all three instances mount the job", mounted);

    const windowStart = Math.ceil((Date.now() + 500) / 1000) * 1000;
    const windowEnd = windowStart + WINDOW_S * 1000;
    await sleep(windowStart + (WINDOW_S * 1000) / 2 - Date.now());
    // Kill the instance that ran the latest tick: the one doing the work.
    const sofar = await allJobLogs(clients[0], job.id);
    const latest = sofar.reduce((x, y) => (y.tickMs > x.tickMs ? y : x), sofar[0]);
    const victim = Math.max(0, servers.findIndex((x) => x.name === latest?.instanceId));
    const survivor = clients[(victim + 1) % 3];
    s.ledger.note("SIGKILL", { instance: servers[victim].name });
    const killedAt = Date.now();
    servers[victim].kill("SIGKILL");
    await sleep(windowEnd + 1500 - Date.now());
    await survivor.pauseJob(job.id);

    const logs = (await allJobLogs(survivor, job.id)).filter((l) => l.tickMs >= windowStart && l.tickMs < windowEnd);
    const ticks = logs.map((l) => l.tickMs).sort((x, y) => x - y);
    const distinct = new Set(ticks);
    const twice = ticks.length - distinct.size;
    const runs = logs.filter((l) => l.status === JobRunStatus.SUCCEEDED).length;
    s.check(`${WINDOW_S} ± 1 runs in the window`, Math.abs(runs - WINDOW_S) <= 1, { runs });
    s.check("never two runs for one tick", twice === 0, { twice });
    const after = ticks.filter((t) => t > killedAt);
    const gaps = after.slice(1).map((t, i) => t - after[i]);
    const firstAfter = after[0] ?? Infinity;
    s.recoveryMs = firstAfter - killedAt;
    s.check("ticks keep coming after the kill (no gap over 2 s)", after.length > 0 && Math.max(firstAfter - killedAt, ...gaps) <= 2000, {
      firstAfterMs: firstAfter - killedAt,
      maxGap: Math.max(0, ...gaps),
    });
    const byInstance: Record<string, number> = {};
    for (const l of logs) byInstance[l.instanceId] = (byInstance[l.instanceId] ?? 0) + 1;
    s.figures.runs = { runs, ticks: ticks.length, twice, byInstance };
    s.lost = WINDOW_S - distinct.size;
    s.duplicates = twice;
    s.note(`${runs} runs for ${WINDOW_S} ticks (lost = ticks with no run, dup = ticks run twice); killed ${servers[victim].name}, which ran the latest tick; runs by instance ${JSON.stringify(byInstance)}`);
  });
});
