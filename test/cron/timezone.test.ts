/** Time zones and daylight saving (SPEC C14), and how expressions are echoed (C3, I1). */
import { afterEach, describe, expect, it } from "vitest";
import { JobRunStatus, JobTrigger, type Job } from "../../src/gen/switchyard/v1/cron_pb.js";
import { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A fresh Redis and instance whose ManualClock starts at `startIso`. */
async function startAt(startIso: string): Promise<{ sy: TestSwitchyard; clock: ManualClock; redis: TestRedis }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const clock = new ManualClock(Date.parse(startIso));
  const sy = await startSwitchyard(redis, { clock });
  cleanups.push(() => sy.stop());
  return { sy, clock, redis };
}

const iso = (ts: { seconds: bigint; nanos: number } | undefined) => new Date(Number(ts!.seconds) * 1000 + ts!.nanos / 1e6).toISOString();
const fireTimes = (job: Job) => job.nextFireTimes.map(iso);
const berlin = (sy: TestSwitchyard, schedule = "0 30 2 * * *") =>
  sy.client.createJob({ name: "berlin 02:30", target: "HelloWorld", schedule, timeZone: "Europe/Berlin" });

/** Advances the manual clock to `targetIso`. */
async function advanceTo(clock: ManualClock, targetIso: string): Promise<void> {
  const target = Date.parse(targetIso);
  expect(target).toBeGreaterThanOrEqual(clock.now());
  await clock.advance(target - clock.now());
}

describe("Europe/Berlin, 02:30 daily", () => {
  it("fires at 03:00 CEST on the spring-forward day, when 02:30 does not exist, then at 02:30 again", async () => {
    const { sy } = await startAt("2026-03-28T12:00:00Z");
    const job = await berlin(sy);
    expect(job.timeZone).toBe("Europe/Berlin");
    expect(fireTimes(job)).toEqual([
      "2026-03-29T01:00:00.000Z", // 03:00 CEST, the first valid time after the gap
      "2026-03-30T00:30:00.000Z", // 02:30 CEST
      "2026-03-31T00:30:00.000Z",
      "2026-04-01T00:30:00.000Z",
      "2026-04-02T00:30:00.000Z",
    ]);
    // GetJob computes them alike (02:30 CET would have been 01:30Z, which never comes).
    expect(fireTimes(await sy.client.getJob(job.id))[0]).toBe("2026-03-29T01:00:00.000Z");
  });

  it("fires once on the fall-back day, at the first 02:30", async () => {
    const { sy } = await startAt("2026-10-24T12:00:00Z");
    const job = await berlin(sy);
    expect(fireTimes(job)).toEqual([
      "2026-10-25T00:30:00.000Z", // 02:30 CEST, the first of the two 02:30s
      "2026-10-26T01:30:00.000Z", // 02:30 CET
      "2026-10-27T01:30:00.000Z",
      "2026-10-28T01:30:00.000Z",
      "2026-10-29T01:30:00.000Z",
    ]);
    expect(fireTimes(job)).not.toContain("2026-10-25T01:30:00.000Z");
  });

  it("fires each repeated wall time once on the fall-back day: 02:20 and 02:40 at their first occurrence only", async () => {
    const { sy, clock } = await startAt("2026-10-25T00:00:00Z");
    const job = await berlin(sy, "0 20,40 2 * * *");
    expect(fireTimes(job).slice(0, 4)).toEqual([
      "2026-10-25T00:20:00.000Z", // 02:20 CEST
      "2026-10-25T00:40:00.000Z", // 02:40 CEST; not 02:20 and 02:40 CET (01:20Z, 01:40Z)
      "2026-10-26T01:20:00.000Z", // 02:20 CET the next day
      "2026-10-26T01:40:00.000Z",
    ]);
    const preview = await sy.client.previewSchedule("0 20,40 2 * * *", "Europe/Berlin", 3);
    expect(preview.fireTimes.map(iso)).toEqual(["2026-10-25T00:20:00.000Z", "2026-10-25T00:40:00.000Z", "2026-10-26T01:20:00.000Z"]);
    // A wildcard minute keeps every real half hour of both 02:xx hours.
    const halfHourly = await berlin(sy, "0 */30 2 * * *");
    expect(fireTimes(halfHourly).slice(0, 4)).toEqual([
      "2026-10-25T00:30:00.000Z", "2026-10-25T01:00:00.000Z", "2026-10-25T01:30:00.000Z", "2026-10-26T01:00:00.000Z",
    ]);
    await sy.client.resumeJob(job.id);
    await expect.poll(() => sy.app.scheduler.mounted()).toContain(job.id);
    await sy.app.scheduler.refresh(job.id);
    await advanceTo(clock, "2026-10-25T02:00:00Z");
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.length, { timeout: 10_000 }).toBe(2);
    await sy.client.getJob(job.id); // a round trip for any (wrong) third run to land
    const ticks = (await sy.client.listJobLogs(job.id)).logs.map((l) => iso(l.tickTime)).sort();
    expect(ticks).toEqual(["2026-10-25T00:20:00.000Z", "2026-10-25T00:40:00.000Z"]);
  });

  it("keeps an hourly job on every real hour through both changes", async () => {
    const { sy } = await startAt("2026-03-28T23:45:00Z");
    const spring = await berlin(sy, "0 30 * * * *");
    // 01:30 CET, then 03:30 CEST: wall-clock 02:30 does not exist, and no real hour is skipped.
    expect(fireTimes(spring).slice(0, 3)).toEqual(["2026-03-29T00:30:00.000Z", "2026-03-29T01:30:00.000Z", "2026-03-29T02:30:00.000Z"]);
    const later = await startAt("2026-10-24T23:45:00Z");
    const autumn = await berlin(later.sy, "0 30 * * * *");
    // 02:30 CEST and 02:30 CET are both real hours, an hour apart.
    expect(fireTimes(autumn).slice(0, 3)).toEqual(["2026-10-25T00:30:00.000Z", "2026-10-25T01:30:00.000Z", "2026-10-25T02:30:00.000Z"]);
  });

  it("runs the scheduled tick at 01:00Z on the spring-forward day, not before", async () => {
    const { sy, clock } = await startAt("2026-03-29T00:00:00Z");
    const job = await berlin(sy);
    await sy.client.resumeJob(job.id);
    await expect.poll(() => sy.app.scheduler.mounted()).toContain(job.id);

    await advanceTo(clock, "2026-03-29T00:59:59.999Z");
    await sy.client.getJob(job.id); // a round trip for any (wrongly) early run to land
    expect((await sy.client.listJobLogs(job.id)).logs).toEqual([]);

    await advanceTo(clock, "2026-03-29T01:00:00.500Z");
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.length, { timeout: 10_000 }).toBe(1);
    const [entry] = (await sy.client.listJobLogs(job.id)).logs;
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.trigger).toBe(JobTrigger.SCHEDULE);
    expect(iso(entry.tickTime)).toBe("2026-03-29T01:00:00.000Z");
    const started = Date.parse(iso(entry.startTime)) - Date.parse("2026-03-29T01:00:00Z");
    expect(started).toBeGreaterThanOrEqual(0);
    expect(started).toBeLessThanOrEqual(500);
    expect(fireTimes(await sy.client.getJob(job.id))[0]).toBe("2026-03-30T00:30:00.000Z");
  });

  it("runs once through the fall-back hour", async () => {
    const { sy, clock } = await startAt("2026-10-25T00:00:00Z");
    const job = await berlin(sy);
    await sy.client.resumeJob(job.id);
    await expect.poll(() => sy.app.scheduler.mounted()).toContain(job.id);

    await advanceTo(clock, "2026-10-25T02:00:00Z"); // past both 02:30 CEST (00:30Z) and 02:30 CET (01:30Z)
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.length, { timeout: 10_000 }).toBe(1);
    await sy.client.getJob(job.id);
    const logs = (await sy.client.listJobLogs(job.id)).logs;
    expect(logs.map((l) => iso(l.tickTime))).toEqual(["2026-10-25T00:30:00.000Z"]);
    expect(logs[0].status).toBe(JobRunStatus.SUCCEEDED);
  });
});

describe("schedules in the API", () => {
  it("refuses an unknown time zone, naming it, and saves nothing", async () => {
    const { sy, redis } = await startAt("2026-01-01T00:00:00Z");
    const before = await redis.plain.hlen("{switchyard}:jobs");
    const create = sy.client.createJob({ name: "mars", target: "HelloWorld", schedule: "0 30 2 * * *", timeZone: "Mars/Olympus_Mons" });
    await expect(create).rejects.toMatchObject({ code: 3, details: expect.stringContaining("Mars/Olympus_Mons") });
    expect(await redis.plain.hlen("{switchyard}:jobs")).toBe(before);

    const job = await berlin(sy);
    await expect(sy.client.updateJob({ id: job.id, timeZone: "Europe/Atlantis" }, ["time_zone"])).rejects.toMatchObject({
      code: 3,
      details: expect.stringContaining("Europe/Atlantis"),
    });
    expect((await sy.client.getJob(job.id)).timeZone).toBe("Europe/Berlin");
  });

  it("defaults the time zone to UTC", async () => {
    const { sy } = await startAt("2026-03-28T12:00:00Z");
    const job = await sy.client.createJob({ name: "utc", target: "HelloWorld", schedule: "0 30 2 * * *" });
    expect(job.timeZone).toBe("UTC");
    expect(fireTimes(job).slice(0, 2)).toEqual(["2026-03-29T02:30:00.000Z", "2026-03-30T02:30:00.000Z"]);
  });

  it("echoes a #-prefixed 5-field expression as 6 fields, and @every as written", async () => {
    const { sy } = await startAt("2026-01-01T00:02:00Z");
    const five = await sy.client.createJob({ name: "five", target: "HelloWorld", schedule: "#  */5  * * * *" });
    expect(five.schedule).toBe("0 */5 * * * *");
    expect(fireTimes(five)).toEqual([
      "2026-01-01T00:05:00.000Z",
      "2026-01-01T00:10:00.000Z",
      "2026-01-01T00:15:00.000Z",
      "2026-01-01T00:20:00.000Z",
      "2026-01-01T00:25:00.000Z",
    ]);
    expect((await sy.client.getJob(five.id)).schedule).toBe("0 */5 * * * *");

    const every = await sy.client.createJob({ name: "every", target: "HelloWorld", schedule: "@every 90s" });
    expect(every.schedule).toBe("@every 90s");
    expect(fireTimes(every).slice(0, 2)).toEqual(["2026-01-01T00:03:30.000Z", "2026-01-01T00:05:00.000Z"]);

    const updated = await sy.client.updateJob({ id: every.id, schedule: "@every   1h30m" }, ["schedule"]);
    expect(updated.schedule).toBe("@every 1h30m");
  });

  it("accepts gcron's predefined @hourly @daily @weekly @monthly @yearly (seed 001), echoed as the six fields they stand for", async () => {
    const { sy } = await startAt("2026-01-01T10:20:00Z"); // a Thursday
    const cases: [string, string, string[]][] = [
      ["@hourly", "0 0 * * * *", ["2026-01-01T11:00:00.000Z", "2026-01-01T12:00:00.000Z"]],
      ["@daily", "0 0 0 * * *", ["2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"]],
      ["@midnight", "0 0 0 * * *", ["2026-01-02T00:00:00.000Z", "2026-01-03T00:00:00.000Z"]],
      ["@weekly", "0 0 0 * * 0", ["2026-01-04T00:00:00.000Z", "2026-01-11T00:00:00.000Z"]],
      ["@monthly", "0 0 0 1 * *", ["2026-02-01T00:00:00.000Z", "2026-03-01T00:00:00.000Z"]],
      ["@yearly", "0 0 0 1 1 *", ["2027-01-01T00:00:00.000Z", "2028-01-01T00:00:00.000Z"]],
      ["@annually", "0 0 0 1 1 *", ["2027-01-01T00:00:00.000Z", "2028-01-01T00:00:00.000Z"]],
    ];
    for (const [nickname, fields, next] of cases) {
      const job = await sy.client.createJob({ name: nickname, target: "HelloWorld", schedule: nickname });
      expect([job.schedule, fireTimes(job).slice(0, 2)], nickname).toEqual([fields, next]);
    }
    await expect(sy.client.createJob({ name: "fortnightly", target: "HelloWorld", schedule: "@fortnightly" })).rejects.toMatchObject({
      code: 3,
      details: expect.stringContaining("use one of @yearly @annually @monthly @weekly @daily @midnight @hourly"),
    });
  });
});
