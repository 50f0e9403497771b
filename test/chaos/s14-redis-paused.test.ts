/**
 * Scenario 14: Redis paused (CLIENT PAUSE 10 s ALL: connections up, nothing
 * answered) under load. Must hold: calls fail with UNAVAILABLE within the
 * command timeout (5 s) instead of waiting out the pause; gRPC health turns
 * NOT_SERVING within 3 s and SERVING once Redis answers; memory bounded;
 * afterwards 0 lost and 0 stranded.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, produce, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sampleRss, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { Code, ServingStatus, declareReliable, recordHealth } from "./harness/grpc.js";

const PAUSE_MS = 10_000;
const COMMAND_TIMEOUT_MS = 5000;

const s = new Scenario("14", "Redis paused 10 s (CLIENT PAUSE ALL)");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

it("a paused Redis fails calls within the command timeout, health follows it down and up, and nothing is lost or stranded", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const server = await startServer("s14-A", redis);
    client = new SwitchyardClient(server.address, { timeoutMs: 30_000 });
    const q = "{s14}";
    await declareReliable(client, q, { minIdleMs: 5000 });
    const health = recordHealth(server.address);
    const rss = sampleRss(server);
    const producer = produce(ledger, client, q, { batch: 5, everyMs: 20 });
    for (const n of [1, 2]) startWorker(ledger, { name: `s14-w${n}`, addresses: [server.address], queue: q, credit: 10, delay: 5 });
    await until(() => ledger.ackedIds().size >= 200, 15_000);
    const rssBefore = rss.peakMb;

    ledger.note("CLIENT PAUSE");
    const from = Date.now();
    await redis.plain.call("CLIENT", "PAUSE", String(PAUSE_MS), "ALL");
    await sleep(PAUSE_MS);
    const failed = producer.failures.filter((f) => f.t >= from && f.t <= from + PAUSE_MS);
    const slowest = Math.max(0, ...failed.map((f) => f.ms));
    const notServing = health.firstAfter(ServingStatus.NOT_SERVING, from);
    const back = await until(() => health.firstAfter(ServingStatus.SERVING, from + PAUSE_MS) !== undefined && producer.lastOkAt() > from + PAUSE_MS, 15_000);
    s.recoveryMs = back ? Math.max(health.firstAfter(ServingStatus.SERVING, from + PAUSE_MS)!, producer.lastOkAt()) - (from + PAUSE_MS) : undefined;
    s.failMs = failed[0] ? failed[0].t - from : undefined;
    s.health = health.summary(from);

    s.check("calls fail during the pause", failed.length > 0, { failed: failed.length });
    s.check("every failure is UNAVAILABLE", failed.every((f) => f.code === Code.UNAVAILABLE), failed.slice(0, 5));
    s.check("the first call fails within the command timeout and 1 s", s.failMs !== undefined && s.failMs <= COMMAND_TIMEOUT_MS + 1000, { failMs: s.failMs });
    s.check("no call waits longer than the command timeout and 1 s", slowest <= COMMAND_TIMEOUT_MS + 1000, { slowest });
    // The readiness check runs every second and gives a PING a second: 2 s, and room for a busy machine.
    s.check("gRPC health turns NOT_SERVING within 3 s", notServing !== undefined && notServing - from <= 3000, { ms: notServing && notServing - from });
    s.check("health SERVING and enqueues acknowledged again within 10 s of the pause's end", back && s.recoveryMs! < 10_000, { recoveryMs: s.recoveryMs });

    await producer.stop();
    const settled = await waitSettled(ledger, redis.plain, [q], 25_000);
    s.peakRssMb = rss.stop();
    health.stop();
    s.check("everything settles", settled);
    s.check("the server process did not crash", server.alive());
    s.check("peak RSS stays within 100 MB of the RSS under load before the fault", s.peakRssMb - rssBefore < 100, {
      before: Math.round(rssBefore),
      peak: Math.round(s.peakRssMb),
    });
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.stranded = f.inProcessing;
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("0 stranded in processing", f.inProcessing === 0, { inProcessing: f.inProcessing });
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.note(
      `${f.enqueued} acknowledged, ${failed.length} enqueue calls failed (slowest ${slowest} ms), ` +
        `${f.unknownDelivered} items of failed calls written anyway (outcome unknown), RSS ${Math.round(rssBefore)} → peak ${Math.round(s.peakRssMb)} MB`,
    );
  }));
