/**
 * Scenario 3: SIGKILL Redis and restart it under load. Must hold: during the
 * outage RPCs are UNAVAILABLE and health is NOT_SERVING; the service does not
 * crash and resumes within 5 s of Redis's restart; 0 acknowledged enqueues are
 * lost (AOF with appendfsync always); cron jobs survive. The same run with AOF
 * off proves that the checker detects loss: it must report lost > 0.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { ExecutePolicy, JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { check, produce, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { Code, HealthProbe, ServingStatus, allJobLogs, codeOf, declareReliable } from "./harness/grpc.js";

const cleanup: (() => unknown)[] = [];
afterAll(async () => {
  killStarted();
  for (const fn of cleanup.reverse()) await fn();
});

const OUTAGE_MS = 2000;

/** One run: load, SIGKILL Redis, outage, restart, recovery. Returns what the ledger says. */
async function outage(s: Scenario, aof: boolean) {
  const { ledger } = s;
  const tag = aof ? "s03" : "s03-noaof";
  const redis: ChaosRedis = await startChaosRedis({ aof });
  cleanup.push(() => redis.stop());
  const server = await startServer(`${tag}-A`, redis);
  const client = new SwitchyardClient(server.address, { timeoutMs: 2000 });
  const health = new HealthProbe(server.address);
  cleanup.push(() => (client.close(), health.close()));
  const q = `{${tag}}`;
  await declareReliable(client, q, { minIdleMs: 2000 });
  const job = await client.createJob({ name: `${tag} every second`, target: "HelloWorld", schedule: "* * * * * *", executePolicy: ExecutePolicy.CONCURRENT });
  await client.resumeJob(job.id);

  // A backlog, workers slower than the producer, so the queue and processing lists hold items at the kill.
  await ledger.enqueue(client, q, Array.from({ length: 500 }, (_, i) => `backlog-${i}`));
  const producer = produce(ledger, client, q, { batch: 5, everyMs: 20 });
  for (const n of [1, 2]) startWorker(ledger, { name: `${tag}-w${n}`, addresses: [server.address], queue: q, credit: 5, delay: 20 });
  await until(() => ledger.ackedIds().size >= 50, 10_000);
  await sleep(500);

  ledger.note("SIGKILL redis");
  const killedAt = Date.now();
  await redis.kill();
  // During the outage: health NOT_SERVING, RPCs UNAVAILABLE.
  const healthSeen: number[] = [];
  const codes: Record<string, number[]> = { Enqueue: [], GetQueueStats: [], GetJob: [] };
  const outageEnd = killedAt + OUTAGE_MS;
  let notServingAt = 0;
  while (Date.now() < outageEnd) {
    const h = await health.check(500);
    healthSeen.push(h);
    if (h === ServingStatus.NOT_SERVING && !notServingAt) notServingAt = Date.now();
    if (notServingAt) {
      codes.Enqueue.push(await codeOf(client.enqueue(q, ["during-outage"])));
      codes.GetQueueStats.push(await codeOf(client.getQueueStats(q)));
      codes.GetJob.push(await codeOf(client.getJob(job.id)));
    }
    await sleep(100);
  }
  s.check("health turns NOT_SERVING within 1 s of the kill", notServingAt > 0 && notServingAt - killedAt < 1000, { ms: notServingAt - killedAt });
  const allUnavailable = Object.values(codes).every((c) => c.length > 0 && c.every((x) => x === Code.UNAVAILABLE));
  s.check("RPCs during the outage are UNAVAILABLE", allUnavailable, codes);

  ledger.note("restart redis");
  const restartedAt = Date.now();
  await redis.restart();
  let servingAt = 0;
  let enqueueAt = 0;
  await until(
    async () => {
      if (!servingAt && (await health.check(500)) === ServingStatus.SERVING) servingAt = Date.now();
      if (!enqueueAt && producer.lastOkAt() > restartedAt) enqueueAt = producer.lastOkAt();
      return servingAt > 0 && enqueueAt > 0;
    },
    10_000,
    20,
  );
  const recoveryMs = servingAt && enqueueAt ? Math.max(servingAt, enqueueAt) - restartedAt : undefined;
  s.check("the server process did not crash", server.alive());
  return { redis, server, client, q, job, producer, recoveryMs, restartedAt };
}

it("SIGKILL Redis (AOF, appendfsync always) under load: UNAVAILABLE and NOT_SERVING during the outage, back within 5 s, 0 lost, cron jobs survive", async () => {
  const s = new Scenario("03", "SIGKILL Redis (AOF always) and restart");
  await s.run(async () => {
    const { ledger } = s;
    const { redis, client, q, job, producer, recoveryMs, restartedAt } = await outage(s, true);
    s.recoveryMs = recoveryMs;
    s.check("service resumes within 5 s of Redis's restart (health SERVING and an Enqueue acknowledged)", recoveryMs !== undefined && recoveryMs < 5000, { recoveryMs });
    await sleep(1500);
    await producer.stop();
    const settled = await waitSettled(ledger, redis.plain, [q], 20_000);
    s.check("everything settles", settled);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 acknowledged enqueues lost", f.lost === 0, f.lostIds);
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    // Cron: the job is still there and running, and it fires again after the restart.
    const after = await client.getJob(job.id);
    s.check("the cron job survives (still RUNNING)", after.status === JobStatus.RUNNING, { status: after.status });
    const fired = await until(async () => (await allJobLogs(client, job.id)).some((l) => l.tickMs > restartedAt + 500), 5000, 200);
    s.check("the cron job fires again after the restart", fired);
    s.note(
      `${f.enqueued} acknowledged enqueues, ${f.unconfirmedCalls} enqueue calls refused during the outage, ` +
        `${f.unknownDelivered} items of refused calls delivered anyway, ${f.indeterminateAcks} acks with an unknown outcome (UNAVAILABLE)`,
    );
  });
});

it("the same outage with AOF off loses items, and the checker reports it", async () => {
  const s = new Scenario("03b", "same, AOF off (checker must see loss)");
  await s.run(async () => {
    const { ledger } = s;
    const { redis, q, producer, recoveryMs } = await outage(s, false);
    s.recoveryMs = recoveryMs;
    await sleep(500);
    await producer.stop();
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    // This run passes when the checker catches the loss.
    s.check("the checker detects the loss (lost > 0)", f.lost > 0, { lost: f.lost });
    s.note(`expected loss: ${f.lost} of ${f.enqueued} acknowledged items gone with the non-persistent Redis`);
  });
});
