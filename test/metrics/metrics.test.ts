/**
 * /metrics on the side HTTP port after a known workload: every counter moves by
 * exactly what the workload did, and the gRPC server metrics count the calls.
 * Real Redis, real gRPC, real HTTP on 127.0.0.1; time is a ManualClock.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import type { JobHandler } from "../../src/cron/handlers.js";
import { ExecutePolicy, JobRunStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { delta, get, key, scrape, type Samples } from "../helpers/http.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;
let release!: () => void;
const gate = new Promise<void>((ok) => (release = ok));
const handlers: Record<string, JobHandler> = {
  Quick: async () => "done",
  Broken: async () => {
    throw new Error("broken on purpose");
  },
  Slow: async () => {
    await gate;
    return "finally done";
  },
};

beforeAll(async () => {
  redis = await startRedis();
  clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0, 0, 500));
  sy = await startSwitchyard(redis, { clock, handlers });
});
afterAll(async () => {
  release();
  await sy?.stop();
  await redis?.stop();
});

const Q = "switchyard.v1.QueueService";
const C = "switchyard.v1.CronService";
const handled = (service: string, method: string, code: string, type = "unary") => ({
  name: "grpc_server_handled_total",
  labels: { grpc_service: service, grpc_method: method, grpc_type: type, grpc_code: code },
});

describe("/metrics", () => {
  it("serves the text format on the side port", async () => {
    expect(sy.app.httpAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    const res = await get(sy.app.httpAddress, "/metrics");
    expect(res.status).toBe(200);
    expect(res.type).toContain("text/plain");
    expect(res.body).toContain("# TYPE switchyard_items_enqueued_total counter");
    expect(res.body).toContain("# TYPE grpc_server_handling_seconds histogram");
    expect(res.body).toContain("process_cpu_seconds_total"); // the default process metrics
    expect((await get(sy.app.httpAddress, "/nope")).status).toBe(404);
  });

  it("counts a workload's items, runs, skipped ticks, lock contention and calls exactly", async () => {
    const before = await scrape(sy.app.httpAddress);
    const c = sy.client;

    // {m}: enqueue 5, lease 5; on the stream: credit 0 first (nothing comes back), then ack 2, retry 2, drop 1.
    await c.createQueue({ name: "{m}", mode: QueueMode.RELIABLE });
    await c.enqueue("{m}", ["a", "b", "c", "d", "e"]);
    const m = c.lease("{m}", 5);
    const ds = await m.take(5);
    m.setCredit(0);
    m.ack(ds[0].leaseToken);
    m.ack(ds[1].leaseToken);
    m.retry(ds[2].leaseToken);
    m.retry(ds[3].leaseToken);
    m.drop(ds[4].leaseToken);
    await expect.poll(async () => [await redis.plain.llen("{m}.processing"), await redis.plain.llen("{m}")]).toEqual([0, 2]);
    expect(await m.close()).toBeUndefined();

    // {dl}: max_deliveries 1, so a unary Retry dead-letters the item.
    await c.createQueue({ name: "{dl}", mode: QueueMode.RELIABLE, maxDeliveries: 1 });
    await c.enqueue("{dl}", ["poison"]);
    const dl = c.lease("{dl}", 1);
    const [poison] = await dl.take(1);
    expect((await c.retry(poison.leaseToken)).deadLettered).toBe(true);
    await dl.close();

    // {ret}: a stream that ends holding 2 items returns them.
    await c.createQueue({ name: "{ret}", mode: QueueMode.RELIABLE });
    await c.enqueue("{ret}", ["x", "y"]);
    const ret = c.lease("{ret}", 2);
    await ret.take(2);
    await ret.close();
    expect(await redis.plain.llen("{ret}")).toBe(2);

    // s: a simple queue, acked with a unary Ack.
    await c.createQueue({ name: "s", mode: QueueMode.SIMPLE });
    await c.enqueue("s", ["one"]);
    const s = c.lease("s", 1);
    const [one] = await s.take(1);
    await c.ack(one.leaseToken);
    await s.close();

    // {r}: an item moved into processing by a plain Redis client; the watchdog claims it, then recovers it after min_idle.
    await c.createQueue({ name: "{r}", mode: QueueMode.RELIABLE, recoverySet: "{r}.claims", minIdle: { seconds: 60n } });
    await redis.plain.lpush("{r}", "raw item");
    await redis.plain.lmove("{r}", "{r}.processing", "RIGHT", "LEFT");
    await sy.app.queues.watchdog.pass();
    await clock.advance(61_000);
    await sy.app.queues.watchdog.pass();
    expect(await redis.plain.llen("{r}")).toBe(1);

    // One failing call.
    await expect(c.getQueue("undeclared")).rejects.toMatchObject({ code: 5 });

    // Cron: a run that succeeds, one that fails, and a singleton job whose second tick finds the first still running.
    const quick = await c.createJob({ name: "quick", target: "Quick", schedule: "0 0 0 * * *" });
    const broken = await c.createJob({ name: "broken", target: "Broken", schedule: "0 0 0 * * *" });
    for (const job of [quick, broken]) {
      const runId = await c.runOnce(job.id);
      await expect.poll(async () => (await c.listJobLogs(job.id)).logs.some((l) => l.id === runId)).toBe(true);
    }
    const slow = await c.createJob({ name: "slow", target: "Slow", schedule: "* * * * * *", executePolicy: ExecutePolicy.SINGLETON });
    await c.resumeJob(slow.id);
    await expect.poll(() => sy.app.scheduler.mounted().includes(slow.id)).toBe(true);
    await sy.app.scheduler.refresh(slow.id); // armed, not only mounted, before the clock moves
    for (let i = 0; i < 8; i++) await clock.advance(250); // ticks at 12:01:02 and 12:01:03: one run, one overlap
    await c.pauseJob(slow.id);
    await expect.poll(async () => (await c.listJobLogs(slow.id)).logs.map((l) => l.status)).toEqual([JobRunStatus.SKIPPED]);
    release();
    await expect.poll(async () => (await c.listJobLogs(slow.id)).logs.length).toBe(2);

    const after = await scrape(sy.app.httpAddress);
    const d = (name: string, labels: Record<string, string> = {}) => delta(before, after, name, labels);
    const items = (event: string, queue: string) => d(`switchyard_items_${event}_total`, { queue });

    expect({
      enqueued: items("enqueued", "{m}"),
      leased: items("leased", "{m}"),
      acked: items("acked", "{m}"),
      retried: items("retried", "{m}"),
      dropped: items("dropped", "{m}"),
      returned: items("returned", "{m}"),
      deadLettered: items("dead_lettered", "{m}"),
    }).toEqual({ enqueued: 5, leased: 5, acked: 2, retried: 2, dropped: 1, returned: 0, deadLettered: 0 });
    expect([items("enqueued", "{dl}"), items("leased", "{dl}"), items("retried", "{dl}"), items("dead_lettered", "{dl}")]).toEqual([1, 1, 0, 1]);
    expect([items("enqueued", "{ret}"), items("leased", "{ret}"), items("returned", "{ret}")]).toEqual([2, 2, 2]);
    expect([items("enqueued", "s"), items("leased", "s"), items("acked", "s")]).toEqual([1, 1, 1]);
    expect([items("enqueued", "{r}"), items("recovered", "{r}"), items("dead_lettered", "{r}")]).toEqual([0, 1, 0]);

    expect(d("switchyard_job_runs_total", { outcome: "succeeded" })).toBe(2); // quick, and slow's one run
    expect(d("switchyard_job_runs_total", { outcome: "failed" })).toBe(1);
    expect(d("switchyard_job_ticks_skipped_total", { reason: "overlap" })).toBe(1);
    expect(d("switchyard_job_ticks_skipped_total", { reason: "misfire" })).toBe(0);
    expect(d("switchyard_job_lock_acquisitions_total", { result: "acquired" })).toBe(1);
    expect(d("switchyard_job_lock_acquisitions_total", { result: "contended" })).toBe(1);

    const calls = (service: string, method: string, code = "OK", type = "unary") => {
      const h = handled(service, method, code, type);
      return d(h.name, h.labels);
    };
    expect({
      CreateQueue: calls(Q, "CreateQueue"),
      // The client's enqueue() calls are messages on its EnqueueStream: counted as messages, not calls.
      EnqueueRequests: d("grpc_server_msg_received_total", { grpc_service: Q, grpc_method: "EnqueueStream", grpc_type: "bidi_stream" }),
      Lease: calls(Q, "Lease", "OK", "bidi_stream"),
      Retry: calls(Q, "Retry"),
      Ack: calls(Q, "Ack"),
      GetQueueNotFound: calls(Q, "GetQueue", "NotFound"),
      CreateJob: calls(C, "CreateJob"),
      RunOnce: calls(C, "RunOnce"),
      ResumeJob: calls(C, "ResumeJob"),
      PauseJob: calls(C, "PauseJob"),
    }).toEqual({ CreateQueue: 5, EnqueueRequests: 4, Lease: 4, Retry: 1, Ack: 1, GetQueueNotFound: 1, CreateJob: 3, RunOnce: 2, ResumeJob: 1, PauseJob: 1 });
    const timed = { grpc_service: Q, grpc_method: "CreateQueue", grpc_type: "unary" };
    expect(d("grpc_server_handling_seconds_count", timed)).toBe(5);
    expect(d("grpc_server_started_total", timed)).toBe(5);
    expect(d("grpc_server_msg_received_total", timed)).toBe(5);
    expect(d("grpc_server_msg_sent_total", timed)).toBe(5);
    expect(after.get(key("grpc_server_handling_seconds_bucket", { ...timed, le: "+Inf" }))).toBeGreaterThanOrEqual(5);
  });

  it("reads queue gauges from Redis on each scrape", async () => {
    await sy.client.createQueue({ name: "{g}", mode: QueueMode.RELIABLE, recoverySet: "{g}.claims", minIdle: { seconds: 60n } });
    await sy.client.enqueue("{g}", ["1", "2", "3"]);
    const lease = sy.client.lease("{g}", 1);
    await lease.take(1);
    await clock.advance(2500);
    await redis.plain.lpush("{g}.dead", "dead one");
    const g = (name: string, samples: Samples) => samples.get(key(name, { queue: "{g}" }));
    let samples = await scrape(sy.app.httpAddress);
    expect({
      ready: g("switchyard_queue_ready_items", samples),
      processing: g("switchyard_queue_processing_items", samples),
      dead: g("switchyard_queue_dead_letter_items", samples),
      age: g("switchyard_queue_oldest_claim_age_seconds", samples),
      streams: g("switchyard_queue_lease_streams", samples),
    }).toEqual({ ready: 2, processing: 1, dead: 1, age: 2.5, streams: 1 });
    expect(samples.get("switchyard_redis_up")).toBe(1);
    expect(samples.get("switchyard_queues_declared")).toBe(6);
    await lease.close();
    await sy.client.deleteQueue("{g}", { purge: true });
    samples = await scrape(sy.app.httpAddress);
    expect(g("switchyard_queue_ready_items", samples)).toBeUndefined(); // a deleted queue leaves the gauges
  });
});
