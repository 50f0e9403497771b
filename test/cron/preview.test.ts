/**
 * PreviewSchedule (the dashboard's live preview) and Job.last_run: a schedule
 * is checked exactly as CreateJob checks it, and fire times come from the
 * scheduler's own schedule code.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { timestampFromMs, timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { JobRunStatus, JobTrigger } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
const iso = (ts: Timestamp[]) => ts.map((x) => new Date(timestampMs(x)).toISOString());

async function refusal(call: Promise<unknown>): Promise<{ code: number; details: string }> {
  try {
    await call;
    return { code: grpc.status.OK, details: "" };
  } catch (err) {
    return { code: (err as grpc.ServiceError).code, details: (err as grpc.ServiceError).details };
  }
}

describe("PreviewSchedule", () => {
  it("gives the next fire times after now by the server's clock, 5 by default, normalised like a stored job", async () => {
    const clock = t.sy.clock as ManualClock;
    await clock.advance(Date.parse("2026-01-01T00:02:00Z") - clock.now());
    const res = await t.sy.client.previewSchedule("#  */15 *   * * *");
    expect(res.schedule).toBe("0 */15 * * * *");
    expect(iso(res.fireTimes)).toEqual([
      "2026-01-01T00:15:00.000Z", "2026-01-01T00:30:00.000Z", "2026-01-01T00:45:00.000Z", "2026-01-01T01:00:00.000Z", "2026-01-01T01:15:00.000Z",
    ]);
    const every = await t.sy.client.previewSchedule("@every 90s", "", 2);
    expect(every.schedule).toBe("@every 90s");
    expect(iso(every.fireTimes)).toEqual(["2026-01-01T00:03:30.000Z", "2026-01-01T00:05:00.000Z"]);
  });

  it("follows the time zone across a DST change from a given start time", async () => {
    const res = await (t.sy.client as unknown as { cron(m: string, r: object): Promise<{ fireTimes: Timestamp[] }> }).cron("previewSchedule", {
      schedule: "0 30 2 * * *",
      timeZone: "Europe/Berlin",
      count: 3,
      startTime: timestampFromMs(Date.parse("2026-03-27T12:00:00Z")),
    });
    // 29 March 2026: 02:30 does not exist in Berlin; it fires at the first valid time after the gap (03:00 CEST = 01:00Z).
    expect(iso(res.fireTimes)).toEqual(["2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"]);
  });

  it("explains what is wrong with a schedule, a zone or a count", async () => {
    const { client } = t.sy;
    expect(await refusal(client.previewSchedule("61 * * * * *"))).toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: expect.stringMatching(/^invalid cron expression: "61 \* \* \* \* \*": /),
    });
    expect(await refusal(client.previewSchedule("* * * *"))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: 'invalid cron expression: "* * * *": write 6 fields (second minute hour day month weekday), or "#" and 5 fields, or "@every <duration>"',
    });
    expect(await refusal(client.previewSchedule("0 * * * * *", "Mars/Olympus"))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: 'unknown time zone "Mars/Olympus"; use an IANA name such as Europe/Berlin or UTC',
    });
    expect(await refusal(client.previewSchedule("0 * * * * *", "", 51))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: "count must be between 0 and 50 (0 means 5)",
    });
    expect((await refusal(client.previewSchedule(" "))).code).toBe(grpc.status.INVALID_ARGUMENT);
    // Found by the fuzz scenario: a start time past what a date can hold was INTERNAL.
    const cron = (r: object) => (client as unknown as { cron(m: string, r: object): Promise<unknown> }).cron("previewSchedule", r);
    for (const seconds of [-1n, 9_000_000_000_000n]) {
      expect(await refusal(cron({ schedule: "0 */5 * * * *", startTime: { seconds, nanos: 0 } }))).toEqual({
        code: grpc.status.INVALID_ARGUMENT,
        details: "start_time must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z",
      });
    }
    const late = (await cron({ schedule: "@every 1000d", count: 3, startTime: timestampFromMs(Date.parse("9999-01-01T00:00:00Z")) })) as {
      fireTimes: Timestamp[];
    };
    expect(late.fireTimes).toEqual([]);
  });
});

describe("Job.last_run", () => {
  it("is unset before the first run and then the newest log entry, in GetJob and ListJobs", async () => {
    const { client } = t.sy;
    const job = await client.createJob({ name: "last-run", target: "HelloWorld", schedule: "0 0 3 * * *" });
    expect(job.lastRun).toBeUndefined();
    const first = await client.runOnce(job.id);
    await expect.poll(async () => (await client.getJob(job.id)).lastRun?.id, { timeout: 10_000 }).toBe(first);
    const second = await client.runOnce(job.id);
    await expect.poll(async () => (await client.getJob(job.id)).lastRun?.id, { timeout: 10_000 }).toBe(second);
    const listed = (await client.listJobs({ name: "last-run" })).jobs[0];
    expect(listed.lastRun).toMatchObject({ id: second, status: JobRunStatus.SUCCEEDED, trigger: JobTrigger.RUN_ONCE, message: "hello world" });
  });
});
