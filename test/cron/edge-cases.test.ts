/** Edge cases found in review: duplicate ids, time zones of interval jobs, bad retention, concurrent changes. */
import { describe, expect, it } from "vitest";
import { type ExecutePolicy, JobRunStatus, JobStatus, type MisfirePolicy } from "../../src/gen/switchyard/v1/cron_pb.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

describe("cron edge cases", () => {
  it("BatchDeleteJobs counts a repeated id once", async () => {
    const job = await t.sy.client.createJob({ name: "twice", target: "HelloWorld", schedule: "0 0 * * * *" });
    expect(await t.sy.client.batchDeleteJobs([job.id, job.id])).toBe(1);
    await expect(t.sy.client.getJob(job.id)).rejects.toMatchObject({ code: 5 });
  });

  it("refuses an unknown time zone for an interval job too", async () => {
    await expect(t.sy.client.createJob({ name: "mars", target: "HelloWorld", schedule: "@every 90s", timeZone: "Mars/Base" })).rejects.toMatchObject({
      code: 3,
      details: expect.stringContaining('unknown time zone "Mars/Base"'),
    });
  });

  it("refuses an interval over 10 years on create and update, and stores nothing: its fire times would leave a Timestamp's range", async () => {
    const tooLong = "invalid cron expression: \"@every 99999999999h\": the interval must be at most 10 years (87600h)";
    await expect(t.sy.client.createJob({ name: "aeons", target: "HelloWorld", schedule: "@every 99999999999h" })).rejects.toMatchObject({ code: 3, details: tooLong });
    const job = await t.sy.client.createJob({ name: "decade", target: "HelloWorld", schedule: "@every 87600h" });
    expect(job.schedule).toBe("@every 87600h");
    await expect(t.sy.client.updateJob({ id: job.id, schedule: "@every 87600h1s" }, ["schedule"])).rejects.toMatchObject({
      code: 3, details: expect.stringContaining("the interval must be at most 10 years"),
    });
    expect((await t.sy.client.getJob(job.id)).schedule).toBe("@every 87600h");
    expect((await t.sy.client.listJobs()).jobs.map((j) => j.name)).not.toContain("aeons");
  });

  it("refuses a misfire policy or an execute policy the proto does not define, as it refuses the other", async () => {
    const base = { name: "odd", target: "HelloWorld", schedule: "0 0 * * * *" };
    await expect(t.sy.client.createJob({ ...base, misfirePolicy: 9 as MisfirePolicy })).rejects.toMatchObject({ code: 3, details: "misfire_policy must be SKIP or RUN_ONCE" });
    await expect(t.sy.client.createJob({ ...base, executePolicy: 9 as ExecutePolicy })).rejects.toMatchObject({ code: 3, details: "execute_policy must be CONCURRENT, SINGLETON or ABANDON" });
    expect((await t.sy.client.listJobs()).jobs.map((j) => j.name)).not.toContain("odd");
  });

  it("refuses params over 1 MiB and a name with control characters, and stores nothing", async () => {
    const base = { name: "sized", target: "queue:{nowhere}", schedule: "0 0 * * * *" };
    const big = JSON.stringify({ pad: "x".repeat(1 << 20) });
    await expect(t.sy.client.createJob({ ...base, params: big })).rejects.toMatchObject({
      code: 3, details: `params is ${big.length} bytes; at most 1048576 (1 MiB): keep large data elsewhere and pass a reference`,
    });
    await expect(t.sy.client.createJob({ ...base, name: "a\u0000b" })).rejects.toMatchObject({ code: 3, details: "name contains control characters; use printable text" });
    const job = await t.sy.client.createJob({ ...base, params: JSON.stringify({ pad: "x".repeat((1 << 20) - 20) }) });
    await expect(t.sy.client.updateJob({ id: job.id, params: big }, ["params"])).rejects.toMatchObject({ code: 3 });
    expect((await t.sy.client.listJobs()).jobs.filter((j) => j.name.includes("\u0000"))).toEqual([]);
  });

  it("fails a LogClean run whose retentionDays is not a number of days", async () => {
    const job = await t.sy.client.createJob({ name: "bad clean", target: "LogClean", schedule: "0 0 * * * *", params: '{"retentionDays":"soon"}' });
    await t.sy.client.runOnce(job.id);
    await expect.poll(async () => (await t.sy.client.listJobLogs(job.id)).logs.length).toBe(1);
    const [log] = (await t.sy.client.listJobLogs(job.id)).logs;
    expect(log.status).toBe(JobRunStatus.FAILED);
    expect(log.error).toContain("retentionDays must be a number");
  });

  it("applies concurrent changes to one job one after the other, losing none", async () => {
    const job = await t.sy.client.createJob({ name: "busy", target: "HelloWorld", schedule: "0 0 * * * *" });
    await t.sy.client.resumeJob(job.id);
    await Promise.all([
      t.sy.client.updateJob({ id: job.id, remark: "changed" }, ["remark"]),
      t.sy.client.pauseJob(job.id),
      t.sy.client.updateJob({ id: job.id, group: "reports" }, ["group"]),
    ]);
    const after = await t.sy.client.getJob(job.id);
    expect([after.remark, after.group, after.status]).toEqual(["changed", "reports", JobStatus.PAUSED]);
  });
});
