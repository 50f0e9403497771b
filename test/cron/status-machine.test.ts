/** The seed's job status machine (SPEC C2), through the API. */
import { describe, expect, it } from "vitest";
import { JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

const newJob = () => t.sy.client.createJob({ name: "hello", target: "HelloWorld", schedule: "0 30 3 * * *" });
const mounted = () => t.sy.app.scheduler.mounted();

describe("job status machine (seed 001 §5.2)", () => {
  it("stores every new job UNPUBLISHED and unmounted, whatever the request says", async () => {
    const job = await t.sy.client.createJob({ name: "x", target: "HelloWorld", schedule: "0 30 3 * * *", status: JobStatus.RUNNING });
    expect(job.status).toBe(JobStatus.UNPUBLISHED);
    expect(mounted()).not.toContain(job.id);
    expect(JSON.parse((await t.redis.plain.hget("{switchyard}:jobs", job.id))!).status).toBe(0);
  });

  it("walks every edge of the diagram, mounting on RUNNING and unmounting otherwise", async () => {
    const { id } = await newJob();
    const edges: [string, () => Promise<{ status: JobStatus }>, JobStatus, boolean][] = [
      ["0 → 1 by Status(1)", () => t.sy.client.setJobStatus(id, JobStatus.RUNNING), JobStatus.RUNNING, true],
      ["1 → 2 by Status(2)", () => t.sy.client.setJobStatus(id, JobStatus.PAUSED), JobStatus.PAUSED, false],
      ["2 → 1 by Resume", () => t.sy.client.resumeJob(id), JobStatus.RUNNING, true],
      ["1 → 2 by Pause", () => t.sy.client.pauseJob(id), JobStatus.PAUSED, false],
      ["2 → 1 by Status(1)", () => t.sy.client.setJobStatus(id, JobStatus.RUNNING), JobStatus.RUNNING, true],
      ["1 → 2 by Pause", () => t.sy.client.pauseJob(id), JobStatus.PAUSED, false],
      ["2 → 0 by Status(0)", () => t.sy.client.setJobStatus(id, JobStatus.UNPUBLISHED), JobStatus.UNPUBLISHED, false],
      ["0 → 1 by Resume", () => t.sy.client.resumeJob(id), JobStatus.RUNNING, true],
    ];
    for (const [edge, move, status, isMounted] of edges) {
      expect((await move()).status, edge).toBe(status);
      await expect.poll(() => mounted().includes(id), { message: edge }).toBe(isMounted);
    }
  });

  it("sets any status from any status, as the seed's status API does (SPEC C2): RUNNING → UNPUBLISHED, UNPUBLISHED → PAUSED", async () => {
    const { id } = await newJob();
    const moves: [string, () => Promise<{ status: JobStatus }>, JobStatus, boolean][] = [
      ["0 → 2 by Pause", () => t.sy.client.pauseJob(id), JobStatus.PAUSED, false],
      ["2 → 0 by Status(0)", () => t.sy.client.setJobStatus(id, JobStatus.UNPUBLISHED), JobStatus.UNPUBLISHED, false],
      ["0 → 2 by Status(2)", () => t.sy.client.setJobStatus(id, JobStatus.PAUSED), JobStatus.PAUSED, false],
      ["2 → 1 by Status(1)", () => t.sy.client.setJobStatus(id, JobStatus.RUNNING), JobStatus.RUNNING, true],
      ["1 → 0 by Status(0)", () => t.sy.client.setJobStatus(id, JobStatus.UNPUBLISHED), JobStatus.UNPUBLISHED, false],
    ];
    for (const [move, call, status, isMounted] of moves) {
      expect((await call()).status, move).toBe(status);
      expect((await t.sy.client.getJob(id)).status, move).toBe(status);
      await expect.poll(() => mounted().includes(id), { message: move }).toBe(isMounted);
    }
    // A value outside the enum is still refused, naming the field.
    await expect(t.sy.client.setJobStatus(id, JobStatus.UNSPECIFIED)).rejects.toMatchObject({ code: 3, details: expect.stringContaining("status") });
  });

  it("soft-deletes from any state and unmounts", async () => {
    const { id } = await newJob();
    await t.sy.client.resumeJob(id);
    await expect.poll(() => mounted().includes(id)).toBe(true);
    await t.sy.client.deleteJob(id);
    await expect.poll(() => mounted().includes(id)).toBe(false);
    await expect(t.sy.client.getJob(id)).rejects.toMatchObject({ code: 5 });
    expect(JSON.parse((await t.redis.plain.hget("{switchyard}:jobs", id))!).deleted).toBe(true);
    await expect(t.sy.client.deleteJob(id)).rejects.toMatchObject({ code: 5 });
  });

  it("remounts a running job when it is updated", async () => {
    const job = await newJob();
    await t.sy.client.resumeJob(job.id);
    const updated = await t.sy.client.updateJob({ id: job.id, schedule: "# */5 * * * *" }, ["schedule"]);
    expect(updated.schedule).toBe("0 */5 * * * *");
    expect(updated.status).toBe(JobStatus.RUNNING);
    const next = updated.nextFireTimes.map((t) => Number(t.seconds) * 1000);
    expect(next).toHaveLength(5);
    expect(next.every((t) => t % 300_000 === 0)).toBe(true);
    // The remount follows the change notice (pub/sub), which on a cluster crosses the cluster bus.
    await expect.poll(() => mounted()).toContain(job.id);
  });

  it("refuses an invalid expression on create and update, saving nothing", async () => {
    const before = await t.redis.plain.hlen("{switchyard}:jobs");
    await expect(t.sy.client.createJob({ name: "bad", target: "HelloWorld", schedule: "61 * * * * *" })).rejects.toMatchObject({
      code: 3,
      details: expect.stringContaining("invalid cron expression"),
    });
    await expect(t.sy.client.createJob({ name: "bad", target: "HelloWorld", schedule: "* * * * *" })).rejects.toMatchObject({
      code: 3,
      details: expect.stringContaining("invalid cron expression"),
    });
    expect(await t.redis.plain.hlen("{switchyard}:jobs")).toBe(before);
    const job = await newJob();
    await expect(t.sy.client.updateJob({ id: job.id, schedule: "nonsense" }, ["schedule"])).rejects.toMatchObject({ code: 3 });
    expect((await t.sy.client.getJob(job.id)).schedule).toBe("0 30 3 * * *");
  });
});
