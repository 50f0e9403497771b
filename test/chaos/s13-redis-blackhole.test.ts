/**
 * Scenario 13: the link to Redis blackholed (TCP open, nothing carried) for
 * 15 s under load, through a proxy between the server and Redis. Must hold:
 * calls fail with UNAVAILABLE within the command timeout (5 s, the default)
 * and none waits longer; gRPC health turns NOT_SERVING within 3 s and back
 * once the link is; the server's RSS stays bounded; afterwards every
 * acknowledged item is delivered (0 lost) and none is left stranded in processing.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, produce, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sampleRss, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { Code, ServingStatus, declareReliable, recordHealth } from "./harness/grpc.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";

const BLACKHOLE_MS = 15_000;
const COMMAND_TIMEOUT_MS = 5000;

const s = new Scenario("13", "Redis link blackholed 15 s under load");
let redis: ChaosRedis | undefined;
let proxy: TcpProxy | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  proxy?.restore();
  await proxy?.close();
  await redis?.stop();
});

it("a blackholed Redis fails calls within the command timeout, health follows, memory stays bounded, and nothing is lost or stranded", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    proxy = await startProxy(`unix:${redis.socketPath}`);
    const server = await startServer("s13-A", { url: `redis://${proxy.address}` });
    client = new SwitchyardClient(server.address, { timeoutMs: 30_000 });
    const q = "{s13}";
    // A short min_idle: claims whose lease reply was lost in the blackhole come back by the watchdog within the scenario.
    await declareReliable(client, q, { minIdleMs: 5000 });
    const health = recordHealth(server.address);
    const rss = sampleRss(server);
    const producer = produce(ledger, client, q, { batch: 5, everyMs: 20 });
    for (const n of [1, 2]) startWorker(ledger, { name: `s13-w${n}`, addresses: [server.address], queue: q, credit: 10, delay: 5 });
    await until(() => ledger.ackedIds().size >= 200, 15_000);
    const rssBefore = rss.peakMb;

    ledger.note("blackhole");
    const from = Date.now();
    proxy.blackhole();
    await sleep(BLACKHOLE_MS);
    const failed = producer.failures.filter((f) => f.t >= from);
    const firstFailure = failed[0]?.t;
    const slowest = Math.max(0, ...failed.map((f) => f.ms));
    const notServing = health.firstAfter(ServingStatus.NOT_SERVING, from);
    ledger.note("restore");
    const restoredAt = Date.now();
    proxy.restore();
    const back = await until(() => health.firstAfter(ServingStatus.SERVING, restoredAt) !== undefined && producer.lastOkAt() > restoredAt, 15_000);
    s.recoveryMs = back ? Math.max(health.firstAfter(ServingStatus.SERVING, restoredAt)!, producer.lastOkAt()) - restoredAt : undefined;
    s.failMs = firstFailure === undefined ? undefined : firstFailure - from;
    s.health = health.summary(from);

    s.check("calls fail during the blackhole", failed.length > 0, { failed: failed.length });
    s.check("every failure is UNAVAILABLE", failed.every((f) => f.code === Code.UNAVAILABLE), failed.slice(0, 5));
    s.check("the first call fails within the command timeout and 1 s", s.failMs !== undefined && s.failMs <= COMMAND_TIMEOUT_MS + 1000, { failMs: s.failMs });
    s.check("no call waits longer than the command timeout and 1 s", slowest <= COMMAND_TIMEOUT_MS + 1000, { slowest });
    // The readiness check runs every second and gives a PING a second: 2 s, and room for a busy machine.
    s.check("gRPC health turns NOT_SERVING within 3 s", notServing !== undefined && notServing - from <= 3000, { ms: notServing && notServing - from });
    s.check("health SERVING and enqueues acknowledged again within 10 s of the link's return", back && s.recoveryMs! < 10_000, { recoveryMs: s.recoveryMs });

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
