/**
 * A job created through one instance fires on another within a second, and
 * keeps firing there when the first is killed (SPEC C13). Instance A is a real
 * child process, so it runs on the production clock (Redis's), as B does.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { ExecutePolicy, JobRunStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const root = join(import.meta.dirname, "..", "..");
let redis: TestRedis;
let b: TestSwitchyard;
let a: ChildProcess;
let aClient: SwitchyardClient;

/** Starts `node dist/main.js` (built by `npm test`) on the test's Redis and resolves to its address. */
function startProcess(redisEnv: Record<string, string>): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(process.execPath, [join(root, "dist", "main.js")], {
    env: { ...process.env, ...redisEnv, SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0", SWITCHYARD_LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((ok, fail) => {
    child.once("exit", (code) => fail(new Error(`instance A exited with ${code}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = /listening on (\S+)/.exec(line);
      if (m) ok({ child, address: m[1] });
    });
  });
}

beforeAll(async () => {
  redis = await startRedis();
  b = await startSwitchyard(redis, { clock: "redis" });
  const started = await startProcess(redis.env);
  a = started.child;
  aClient = new SwitchyardClient(started.address);
});
afterAll(async () => {
  a.kill("SIGKILL");
  aClient.close();
  await b.stop();
  await redis.stop();
});

const ms = (t: JobLog["tickTime"]) => Number(t!.seconds) * 1000 + t!.nanos / 1e6;

describe("changes reach every instance", () => {
  it("fires a job created through A on B within a second, and keeps firing it on B once A is killed", async () => {
    const job = await aClient.createJob({ name: "failover", target: "HelloWorld", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    const published = Date.now();
    await aClient.resumeJob(job.id);
    await expect.poll(() => b.app.scheduler.mounted().includes(job.id), { timeout: 1000, interval: 10 }).toBe(true);
    expect(Date.now() - published).toBeLessThan(1000);

    // Each instance publishes what it mounted within 100 ms of a change.
    await expect
      .poll(async () => (await b.client.getSchedulerStatus()).instances.map((i) => i.mountedJobIds.includes(job.id)), { timeout: 1000 })
      .toEqual([true, true]);

    // Let both instances fire a few ticks, then kill A mid-schedule.
    await expect.poll(async () => (await b.client.listJobLogs(job.id)).logs.length, { timeout: 5000 }).toBeGreaterThanOrEqual(2);
    a.kill("SIGKILL");
    const killedAt = b.clock.now();
    await expect
      .poll(async () => (await b.client.listJobLogs(job.id, 1000)).logs.filter((l) => ms(l.tickTime) > killedAt + 1000).length, { timeout: 6000 })
      .toBeGreaterThanOrEqual(3);
    const logs = (await b.client.listJobLogs(job.id, 1000)).logs;
    const ticks = logs.map((l) => ms(l.tickTime));
    expect(new Set(ticks).size).toBe(ticks.length); // never two runs for one tick
    expect(logs.every((l) => l.status === JobRunStatus.SUCCEEDED)).toBe(true);
    const afterKill = logs.filter((l) => ms(l.tickTime) > killedAt + 1000);
    expect(new Set(afterKill.map((l) => l.instanceId))).toEqual(new Set([b.app.scheduler.instanceId]));
    // No gap on B after the kill: consecutive seconds.
    const sorted = afterKill.map((l) => ms(l.tickTime)).sort((x, y) => x - y);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i] - sorted[i - 1]).toBe(1000);
  });
});
