/** The built-in LogClean job (SPEC C11, seed 001 §6): retention, batches of 5000, at most 200000 per run. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobRunStatus, JobStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import { CLEAN_BATCH, CLEAN_MAX_PER_RUN, JobLogStore, type JobLogEntry } from "../../src/cron/job-log.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const DAY = 86_400_000;
const keys = systemKeys("switchyard");

let redis: TestRedis;
let sy: TestSwitchyard;
let now: number;
beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  now = sy.clock.now();
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

let nextSeq = 1_000_000_000; // far above the store's own counter

/** A log entry in the store's format (see JobLogStore.append). */
function entry(jobId: string, startTimeMs: number): JobLogEntry {
  return {
    id: `${jobId}-${nextSeq++}`,
    jobId,
    status: "succeeded",
    message: "hello world",
    error: "",
    durationMs: 3,
    trigger: "schedule",
    instanceId: "history",
    tickTimeMs: startTimeMs,
    startTimeMs,
    fence: 0,
  };
}

/** Writes entries straight into Redis, as JobLogStore.append lays them out, in pipelined chunks. */
async function writeEntries(entries: JobLogEntry[], k = keys): Promise<void> {
  const CHUNK = 5000;
  for (let i = 0; i < entries.length; i += CHUNK) {
    const chunk = entries.slice(i, i + CHUNK);
    const pipe = redis.plain.pipeline();
    pipe.hset(k.logs, Object.fromEntries(chunk.map((e) => [e.id, JSON.stringify(e)])));
    pipe.zadd(k.logTime, ...chunk.flatMap((e) => [e.startTimeMs, e.id]));
    const byJob = new Map<string, JobLogEntry[]>();
    for (const e of chunk) {
      const list = byJob.get(e.jobId);
      if (list) list.push(e);
      else byJob.set(e.jobId, [e]);
    }
    for (const [jobId, es] of byJob) pipe.zadd(k.jobLogs(jobId), ...es.flatMap((e) => [Number(e.id.slice(e.id.lastIndexOf("-") + 1)), e.id]));
    const results = await pipe.exec();
    for (const [err] of results ?? []) if (err) throw err;
  }
}

/** Entries older than `ms` (by the time index, the per-job index and the hash agreeing). */
const olderThan = (ms: number) => redis.plain.zcount(keys.logTime, "-inf", `(${ms}`);

async function runAndWait(jobId: string, client = sy.client): Promise<JobLog> {
  const runId = await client.runOnce(jobId);
  await expect.poll(async () => (await client.listJobLogs(jobId)).logs.map((l) => l.id), { timeout: 20_000, interval: 100 }).toContain(runId);
  return (await client.listJobLogs(jobId)).logs.find((l) => l.id === runId)!;
}

const logCleanJob = (params: string, client = sy.client) =>
  client.createJob({ name: `LogClean ${params || "(no params)"}`, target: "LogClean", params, schedule: "0 0 4 * * *" });

/** How many ZRANGEBYSCORE calls the node holding `key` has served since the last reset (LogClean makes one per batch). */
async function rangeCalls(key: string): Promise<number> {
  const stats = await redis.nodeFor(key).info("commandstats");
  return Number(/cmdstat_zrangebyscore:calls=(\d+)/.exec(stats)?.[1] ?? 0);
}

describe("the built-in LogClean job", () => {
  it("is seeded once, RUNNING, daily at 02:30, and not again by a second instance or a restart", async () => {
    const named = async (client = sy.client) => (await client.listJobs({ name: "LogClean" })).jobs.filter((j) => j.name === "LogClean");
    const [builtin, ...others] = await named();
    expect(others).toEqual([]);
    expect(builtin).toMatchObject({ name: "LogClean", target: "LogClean", status: JobStatus.RUNNING, schedule: "0 30 2 * * *" });
    expect(sy.app.scheduler.mounted()).toContain(builtin.id);

    const second = await startSwitchyard(redis);
    try {
      expect((await named(second.client)).map((j) => j.id)).toEqual([builtin.id]);
      expect(second.app.scheduler.mounted()).toContain(builtin.id);
    } finally {
      await second.stop();
    }

    // An operator who deleted it keeps it deleted across restarts.
    await sy.client.deleteJob(builtin.id);
    const third = await startSwitchyard(redis);
    try {
      expect(await named(third.client)).toEqual([]);
    } finally {
      await third.stop();
    }
  });
});

describe("JobLogStore.clean", () => {
  it("removes the oldest entries a batch at a time, at most `max` per call", async () => {
    const unitKeys = systemKeys("clean-unit");
    const store = new JobLogStore(sy.app.redis, unitKeys);
    const entries = Array.from({ length: 10 }, (_, i) => entry("7", now - 50 * DAY + i));
    for (const e of entries) await store.append(e);
    const recent = entry("7", now - DAY);
    await store.append(recent);

    await redis.nodeFor(unitKeys.logTime).config("RESETSTAT");
    expect(await store.clean(now - 30 * DAY, 3, 7)).toBe(7);
    expect(await rangeCalls(unitKeys.logTime)).toBe(3); // 3 + 3 + 1
    const left = await redis.plain.zrange(unitKeys.jobLogs("7"), 0, -1);
    expect(left).toEqual([...entries.slice(7).map((e) => e.id), recent.id]);
    expect(await redis.plain.hlen(unitKeys.logs)).toBe(4);
    expect(await redis.plain.zcard(unitKeys.logTime)).toBe(4);

    expect(await store.clean(now - 30 * DAY, 3, 7)).toBe(3);
    expect(await store.clean(now - 30 * DAY, 3, 7)).toBe(0);
    expect(await redis.plain.zrange(unitKeys.jobLogs("7"), 0, -1)).toEqual([recent.id]);
    expect(await redis.plain.hkeys(unitKeys.logs)).toEqual([recent.id]);
  });

  it("counts only what it removed itself when two cleans race", async () => {
    const unitKeys = systemKeys("clean-race");
    const store = new JobLogStore(sy.app.redis, unitKeys);
    await writeEntries(Array.from({ length: 2000 }, (_, i) => entry("8", now - 50 * DAY + i)), unitKeys);
    const counts = await Promise.all([store.clean(now - 30 * DAY, 100), store.clean(now - 30 * DAY, 100)]);
    expect(counts[0] + counts[1]).toBe(2000);
    expect(await redis.plain.exists(unitKeys.logs, unitKeys.logTime, unitKeys.jobLogs("8"))).toBe(0);
  });

  it("uses the seed's batch of 5000 and cap of 200000", () => {
    expect(CLEAN_BATCH).toBe(5000);
    expect(CLEAN_MAX_PER_RUN).toBe(200_000);
  });
});

describe("LogClean runs", () => {
  it("removes at most 200000 old entries per run, in batches of 5000, and keeps recent ones", async () => {
    const history = await sy.client.createJob({ name: "history", target: "HelloWorld", schedule: "0 0 3 * * *" });
    const old = Array.from({ length: 205_000 }, (_, i) => entry(history.id, now - 100 * DAY + i)); // 1 ms apart
    const recent = Array.from({ length: 10 }, (_, i) => entry(history.id, now - 10 * DAY + i));
    await writeEntries([...old, ...recent]);
    const cutoff = now - 30 * DAY;
    expect(await olderThan(cutoff)).toBe(205_000);

    const clean = await logCleanJob('{"retentionDays": 30}');
    await redis.nodeFor(keys.logTime).config("RESETSTAT");
    const first = await runAndWait(clean.id);
    expect(first.status).toBe(JobRunStatus.SUCCEEDED);
    expect(first.message).toMatch(/\b200000\b/);
    expect(first.message).toContain("30 days");
    const calls = await rangeCalls(keys.logTime);
    expect(calls).toBeGreaterThanOrEqual(40); // 200000 in batches of at most 5000
    expect(calls).toBeLessThanOrEqual(41);

    expect(await olderThan(cutoff)).toBe(5000);
    expect(await redis.plain.zcard(keys.jobLogs(history.id))).toBe(5010);
    expect(await redis.plain.hlen(keys.logs)).toBe(5010 + 1); // + LogClean's own entry
    for (const e of recent) expect(await redis.plain.hexists(keys.logs, e.id)).toBe(1);
    // The oldest went first: the 5000 newest old entries are left.
    expect(await redis.plain.zrange(keys.logTime, 0, 4999)).toEqual(old.slice(200_000).map((e) => e.id));

    const second = await runAndWait(clean.id);
    expect(second.status).toBe(JobRunStatus.SUCCEEDED);
    expect(second.message).toMatch(/\b5000\b/);
    expect(await olderThan(cutoff)).toBe(0);
    expect(await redis.plain.zrange(keys.jobLogs(history.id), 0, -1)).toEqual(recent.map((e) => e.id));
    const page = await sy.client.listJobLogs(history.id, 100);
    expect(page.logs.map((l) => l.id)).toEqual(recent.map((e) => e.id).reverse());

    const third = await runAndWait(clean.id);
    expect(third.message).toMatch(/\b0\b/);
    expect((await sy.client.listJobLogs(clean.id)).logs).toHaveLength(3);
  }, 60_000);

  it.each([
    ["missing", ""],
    ["0", '{"retentionDays": 0}'],
    ["absent from JSON null params", "null"],
  ])("uses the configured retention (default 90 days) when retentionDays is %s", async (_, params) => {
    const owner = await sy.client.createJob({ name: "retention", target: "HelloWorld", schedule: "0 0 3 * * *" });
    const gone = [entry(owner.id, now - 91 * DAY), entry(owner.id, now - 90 * DAY - 1000)];
    const kept = [entry(owner.id, now - 89 * DAY), entry(owner.id, now - 90 * DAY + 1000)];
    await writeEntries([...gone, ...kept]);

    const result = await runAndWait((await logCleanJob(params)).id);
    expect(result.status).toBe(JobRunStatus.SUCCEEDED);
    expect(result.message).toContain("90 days");
    expect(result.message).toMatch(/\b2\b/);
    expect(await redis.plain.zrange(keys.jobLogs(owner.id), 0, -1)).toEqual(kept.map((e) => e.id));
  });

  it("takes the retention from SWITCHYARD_LOG_RETENTION_DAYS", async () => {
    const other = await startSwitchyard(redis, { env: { SWITCHYARD_LOG_RETENTION_DAYS: "20" } });
    try {
      const owner = await other.client.createJob({ name: "retention 20", target: "HelloWorld", schedule: "0 0 3 * * *" });
      const gone = entry(owner.id, now - 21 * DAY);
      const kept = entry(owner.id, now - 19 * DAY);
      await writeEntries([gone, kept]);
      const result = await runAndWait((await logCleanJob("", other.client)).id, other.client);
      expect(result.message).toContain("20 days");
      expect(await redis.plain.zrange(keys.jobLogs(owner.id), 0, -1)).toEqual([kept.id]);
      // The 10-day-old entries of the earlier test are younger than 20 days too.
      expect(await olderThan(now - 20 * DAY)).toBe(0);
    } finally {
      await other.stop();
    }
  });
});
