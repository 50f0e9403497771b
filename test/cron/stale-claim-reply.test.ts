/**
 * Issue 12, defect 8: a tick's claim that ran while the job was paused must
 * not unmount the mount the job's resume made meanwhile. Instance A reaches
 * Redis through a link that holds its command connection from the claim on:
 * the claim runs between a pause and a resume (made on instance B), and its
 * answer reaches A together with A's re-reads of the job after both
 * announcements (its subscriber connection is not held). A acts on all three
 * in one turn: the re-read after the resume mounts the job, then the claim's
 * answer, "inactive" with the paused record, arrives at the scheduler. Being
 * on one connection, the claim's answer cannot come later than those re-reads;
 * it can only come in the same read, which is what the link makes sure of.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ManualClock, type Clock } from "../../src/clock.js";
import { ExecutePolicy, JobRunStatus, JobStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: StandaloneRedis;
let link: Link;
let instances: TestSwitchyard[] = [];

beforeAll(async () => {
  redis = await startStandaloneRedis();
  link = await startLink(redis.socketPath);
});
afterEach(async () => {
  await Promise.all(instances.map((i) => i.stop()));
  instances = [];
  await redis.flushAll();
});
afterAll(async () => {
  await link?.close();
  await redis?.stop();
});

const tickOf = (l: JobLog) => Number(l.tickTime!.seconds) * 1000 + l.tickTime!.nanos / 1e6;
const occurrences = (text: string, part: string) => text.split(part).length - 1;
const JOBS = "{switchyard}:jobs";

describe("defect 8: a stale claim reply", () => {
  it("leaves the mount made by a resume that the claim's answer arrived after", async () => {
    const clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
    const handlers = { Quick: async () => "done" };
    // No resync within the test: it would remount the job whatever the claim did.
    const a = await startSwitchyard(redis, {
      clock, handlers, config: { redis: { kind: "standalone", url: `redis://${link.address}` }, schedulerResyncMs: 3_600_000 },
    });
    instances.push(a);
    // B shares A's time but fires no timer of its own: it claims no tick, it only pauses and resumes.
    const idle: Clock = { now: () => clock.now(), setTimer: () => ({ cancel: () => undefined }) };
    const b = await startSwitchyard(redis, { clock: idle, handlers });
    instances.push(b);
    const { id } = await b.client.createJob({ name: "ten", target: "Quick", schedule: "*/10 * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
    await b.client.resumeJob(id);
    await expect.poll(() => a.app.scheduler.mounted()).toContain(id);
    await a.app.scheduler.refresh(id); // armed for 12:00:10

    const tick = Date.UTC(2026, 5, 1, 12, 0, 10);
    const holding = link.hold((chunk) => {
      const text = chunk.toString("latin1");
      return text.includes("{switchyard}:cron:ticks") && text.includes(`\r\n${tick}\r\n`); // claim-ticks.lua for 12:00:10
    });
    const ticking = clock.advance(9_500); // resolves once A has acted on the claim
    const held = await holding;
    await b.client.pauseJob(id);
    const paused = (await redis.plain.hget(JOBS, id))!;
    held.forward(); // the claim runs now, while the job is paused
    await expect.poll(() => held.replies.includes(paused)).toBe(true);
    await b.client.resumeJob(id);
    const resumed = (await redis.plain.hget(JOBS, id))!;
    // Held for A: the claim's answer and A's re-reads after the pause and the resume (the last finds it RUNNING).
    await expect.poll(() => occurrences(held.replies, paused) + occurrences(held.replies, resumed)).toBe(3);
    expect(held.replies).toContain(resumed);
    expect(occurrences(held.requests.join(""), `hget\r\n$${JOBS.length}\r\n${JOBS}\r\n`)).toBe(2);
    held.release();
    await ticking;

    expect(a.app.scheduler.mounted()).toContain(id);
    expect((await b.client.getJob(id)).status).toBe(JobStatus.RUNNING);
    // The claimed tick fell while the job was paused: logged as such.
    const [skipped] = (await b.client.listJobLogs(id, 10)).logs;
    expect([skipped.status, skipped.message, tickOf(skipped)]).toEqual([JobRunStatus.SKIPPED, "skipped: the job is paused", tick]);
    // And A runs the next tick, with no resync to remount the job.
    await clock.advance(10_000);
    await expect.poll(async () => (await b.client.listJobLogs(id, 10)).logs.length).toBe(2);
    const run = (await b.client.listJobLogs(id, 10)).logs.find((l) => l.status !== JobRunStatus.SKIPPED)!;
    expect([run.status, run.message, tickOf(run)]).toEqual([JobRunStatus.SUCCEEDED, "done", tick + 10_000]);
  });
});
