/** Edge cases found in review: duplicate ids, time zones of interval jobs, bad retention, concurrent changes. */
import { describe, expect, it } from "vitest";
import { JobRunStatus, JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
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
