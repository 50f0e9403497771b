/** CronService reads, pages, filters, batch deletes and scheduler status (SPEC C1, C2, C10, C12, S1). */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobRunStatus, JobStatus, JobTrigger, type Job } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const INVALID_ARGUMENT = 3;
const NOT_FOUND = 5;

let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;
let builtinId: string;
beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  clock = sy.clock as ManualClock;
  builtinId = (await sy.client.listJobs({ name: "LogClean" })).jobs[0].id;
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

const newJob = (name: string) => sy.client.createJob({ name, target: "HelloWorld", schedule: "0 30 3 * * *" });

/** Every page of a listing, following next_page_token. */
async function allPages(request: { pageSize: number; status?: JobStatus; name?: string }): Promise<string[][]> {
  const pages: string[][] = [];
  let pageToken = "";
  do {
    const page = await sy.client.listJobs({ ...request, pageToken });
    pages.push(page.jobs.map((j) => j.id));
    pageToken = page.nextPageToken;
    expect(pages.length).toBeLessThan(20);
  } while (pageToken);
  return pages;
}

describe("ListJobs", () => {
  it("pages through every job by id, without duplicates or an empty last page", async () => {
    // Only the built-in LogClean job exists so far; delete it so the listing holds exactly our 5.
    await sy.client.deleteJob(builtinId);
    const ids: string[] = [];
    for (let i = 1; i <= 5; i++) ids.push((await newJob(`paged ${i}`)).id);

    const pages = await allPages({ pageSize: 2 });
    expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
    expect(pages.flat()).toEqual(ids);
    expect(new Set(pages.flat()).size).toBe(5);

    expect(await allPages({ pageSize: 5 })).toEqual([ids]);
    expect((await sy.client.listJobs({})).jobs.map((j) => j.id)).toEqual(ids);
    for (const id of ids) await sy.client.deleteJob(id);
    expect((await sy.client.listJobs({})).jobs).toEqual([]);
  });

  it("refuses a page token it did not issue", async () => {
    await expect(sy.client.listJobs({ pageToken: "not a token!" })).rejects.toMatchObject({ code: INVALID_ARGUMENT });
  });

  it("filters by status and by name (case-insensitive), and pages the filtered list", async () => {
    const [a, b, c, d, e] = await Promise.all(
      ["Nightly REPORT", "weekly report", "cleanup", "Report archive", "invoices"].map((n) => newJob(n)),
    ).then((jobs) => jobs.sort((x, y) => Number(x.id) - Number(y.id)));
    await sy.client.resumeJob(a.id);
    await sy.client.resumeJob(c.id);
    await sy.client.resumeJob(d.id);
    await sy.client.pauseJob(d.id);

    const ids = (jobs: Job[]) => jobs.map((j) => j.id);
    expect(ids((await sy.client.listJobs({ status: JobStatus.RUNNING })).jobs)).toEqual([a.id, c.id]);
    expect(ids((await sy.client.listJobs({ status: JobStatus.PAUSED })).jobs)).toEqual([d.id]);
    expect(ids((await sy.client.listJobs({ status: JobStatus.UNPUBLISHED })).jobs)).toEqual([b.id, e.id]);
    expect(ids((await sy.client.listJobs({ name: "report" })).jobs)).toEqual([a.id, b.id, d.id]);
    expect(ids((await sy.client.listJobs({ name: "RePoRt" })).jobs)).toEqual([a.id, b.id, d.id]);
    expect(ids((await sy.client.listJobs({ name: "report", status: JobStatus.RUNNING })).jobs)).toEqual([a.id]);
    expect((await sy.client.listJobs({ name: "no such job" })).jobs).toEqual([]);
    expect(await allPages({ pageSize: 2, name: "REPORT" })).toEqual([[a.id, b.id], [d.id]]);
    for (const j of [a, b, c, d, e]) await sy.client.deleteJob(j.id);
  });
});

describe("ListJobLogs", () => {
  it("lists a job's runs newest first, a page at a time", async () => {
    const job = await newJob("logged");
    const runIds: string[] = [];
    for (let i = 0; i < 5; i++) runIds.push(await sy.client.runOnce(job.id));
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.length, { timeout: 10_000 }).toBe(5);

    const newestFirst = [...runIds].reverse();
    expect((await sy.client.listJobLogs(job.id)).logs.map((l) => l.id)).toEqual(newestFirst);
    const pages: string[][] = [];
    let token = "";
    do {
      const page = await sy.client.listJobLogs(job.id, 2, token);
      pages.push(page.logs.map((l) => l.id));
      token = page.nextPageToken;
    } while (token && pages.length < 10);
    expect(pages).toEqual([newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)]);

    for (const entry of (await sy.client.listJobLogs(job.id)).logs) {
      expect(entry).toMatchObject({ jobId: job.id, status: JobRunStatus.SUCCEEDED, trigger: JobTrigger.RUN_ONCE, message: "hello world" });
      expect(entry.instanceId).toBe(sy.app.scheduler.instanceId);
    }
    // Another job's log is separate.
    expect((await sy.client.listJobLogs((await newJob("quiet")).id)).logs).toEqual([]);
  });

  it("is NOT_FOUND for a job that does not exist", async () => {
    await expect(sy.client.listJobLogs("999999")).rejects.toMatchObject({ code: NOT_FOUND });
  });
});

describe("UpdateJob", () => {
  it("refuses an update_mask path it does not know, or one that is not updatable, changing nothing", async () => {
    const job = await newJob("masked");
    for (const path of ["colour", "status", "id", "create_time", "next_fire_times"]) {
      await expect(sy.client.updateJob({ id: job.id, name: "renamed" }, ["name", path]), path).rejects.toMatchObject({
        code: INVALID_ARGUMENT,
        details: expect.stringContaining(path),
      });
    }
    const stored = await sy.client.getJob(job.id);
    expect(stored.name).toBe("masked");
    expect(stored.updateTime).toEqual(job.updateTime);
  });

  it("changes only the fields in the mask", async () => {
    const job = await newJob("partial");
    const updated = await sy.client.updateJob({ id: job.id, name: "renamed", remark: "not in the mask" }, ["name"]);
    expect(updated.name).toBe("renamed");
    expect(updated.remark).toBe("");
  });

  it("is NOT_FOUND for a job that does not exist", async () => {
    await expect(sy.client.updateJob({ id: "999999", name: "x" }, ["name"])).rejects.toMatchObject({ code: NOT_FOUND });
  });
});

describe("BatchDeleteJobs", () => {
  it("deletes every job named", async () => {
    const jobs = [await newJob("batch 1"), await newJob("batch 2"), await newJob("batch 3")];
    await sy.client.resumeJob(jobs[0].id);
    await expect.poll(() => sy.app.scheduler.mounted()).toContain(jobs[0].id);
    expect(await sy.client.batchDeleteJobs(jobs.map((j) => j.id))).toBe(3);
    for (const j of jobs) await expect(sy.client.getJob(j.id)).rejects.toMatchObject({ code: NOT_FOUND });
    await expect.poll(() => sy.app.scheduler.mounted()).not.toContain(jobs[0].id);
  });

  it("deletes none when one id does not exist", async () => {
    const jobs = [await newJob("keep 1"), await newJob("keep 2")];
    await expect(sy.client.batchDeleteJobs([jobs[0].id, "999999", jobs[1].id])).rejects.toMatchObject({
      code: NOT_FOUND,
      details: expect.stringContaining("999999"),
    });
    for (const j of jobs) expect((await sy.client.getJob(j.id)).name).toBe(j.name);
  });

  it("deletes none when one job is already deleted", async () => {
    const [kept, gone] = [await newJob("keep 3"), await newJob("gone")];
    await sy.client.deleteJob(gone.id);
    await expect(sy.client.batchDeleteJobs([kept.id, gone.id])).rejects.toMatchObject({ code: NOT_FOUND });
    expect((await sy.client.getJob(kept.id)).name).toBe("keep 3");
  });
});

describe("GetSchedulerStatus", () => {
  it("lists this instance with the jobs it has mounted", async () => {
    const jobs = [await newJob("mounted 1"), await newJob("mounted 2")];
    for (const j of jobs) await sy.client.resumeJob(j.id);
    await expect.poll(() => sy.app.scheduler.mounted()).toEqual(expect.arrayContaining(jobs.map((j) => j.id)));
    await clock.advance(5_000); // one scheduler heartbeat records it

    const { instances } = await sy.client.getSchedulerStatus();
    const me = instances.find((i) => i.instanceId === sy.app.scheduler.instanceId);
    expect(me).toBeDefined();
    expect(instances).toHaveLength(1);
    expect(me!.mountedJobIds).toEqual(sy.app.scheduler.mounted());
    expect(me!.mountedJobIds).toEqual(expect.arrayContaining(jobs.map((j) => j.id)));
    expect(me!.mountedCount).toBe(me!.mountedJobIds.length);
    expect(Number(me!.startTime!.seconds) * 1000).toBe(sy.app.scheduler.startTimeMs - (sy.app.scheduler.startTimeMs % 1000));
    expect(Number(me!.lastSeenTime!.seconds) * 1000).toBe(clock.now() - (clock.now() % 1000));

    await sy.client.pauseJob(jobs[0].id);
    await expect.poll(() => sy.app.scheduler.mounted()).not.toContain(jobs[0].id);
    await clock.advance(5_000);
    const after = (await sy.client.getSchedulerStatus()).instances.find((i) => i.instanceId === sy.app.scheduler.instanceId)!;
    expect(after.mountedJobIds).not.toContain(jobs[0].id);
    expect(after.mountedJobIds).toContain(jobs[1].id);
    await sy.client.pauseJob(jobs[1].id);
  });

  it("lists a second instance on the same Redis, and drops it once it stops", async () => {
    const other = await startSwitchyard(redis, { clock: sy.clock, config: { instanceId: "second-instance" } });
    let stopped = false;
    try {
      const ids = (await sy.client.getSchedulerStatus()).instances.map((i) => i.instanceId);
      expect(ids).toEqual([sy.app.scheduler.instanceId, "second-instance"].sort());
      await other.stop();
      stopped = true;
      expect((await sy.client.getSchedulerStatus()).instances.map((i) => i.instanceId)).toEqual([sy.app.scheduler.instanceId]);
    } finally {
      if (!stopped) await other.stop();
    }
  });
});

describe("RunOnce and GetJob", () => {
  it("runs an UNPUBLISHED job and leaves it UNPUBLISHED and unmounted", async () => {
    const job = await newJob("draft");
    const runId = await sy.client.runOnce(job.id);
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.map((l) => l.id), { timeout: 10_000 }).toEqual([runId]);
    const [entry] = (await sy.client.listJobLogs(job.id)).logs;
    expect(entry).toMatchObject({ status: JobRunStatus.SUCCEEDED, trigger: JobTrigger.RUN_ONCE, message: "hello world" });
    expect(entry.tickTime).toBeUndefined();
    const after = await sy.client.getJob(job.id);
    expect(after.status).toBe(JobStatus.UNPUBLISHED);
    expect(after.updateTime).toEqual(job.updateTime);
    expect(sy.app.scheduler.mounted()).not.toContain(job.id);
  });

  it("runs a PAUSED job and leaves it PAUSED", async () => {
    const job = await newJob("paused");
    await sy.client.resumeJob(job.id);
    await sy.client.pauseJob(job.id);
    const runId = await sy.client.runOnce(job.id);
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.map((l) => l.id), { timeout: 10_000 }).toEqual([runId]);
    expect((await sy.client.getJob(job.id)).status).toBe(JobStatus.PAUSED);
  });

  it("is NOT_FOUND for RunOnce and GetJob of a missing or deleted job", async () => {
    await expect(sy.client.getJob("999999")).rejects.toMatchObject({ code: NOT_FOUND, details: expect.stringContaining("999999") });
    await expect(sy.client.runOnce("999999")).rejects.toMatchObject({ code: NOT_FOUND });
    const job = await newJob("deleted");
    await sy.client.deleteJob(job.id);
    await expect(sy.client.getJob(job.id)).rejects.toMatchObject({ code: NOT_FOUND });
    await expect(sy.client.runOnce(job.id)).rejects.toMatchObject({ code: NOT_FOUND });
  });
});
