/**
 * One Redis fault under load, and what must hold through it (scenarios 13 and
 * 14): a producer and two workers run; the fault lasts `faultMs`; calls must
 * fail with UNAVAILABLE within the command timeout and none wait longer; gRPC
 * health must turn NOT_SERVING within 3 s and SERVING once Redis answers;
 * the server's RSS must stay within 100 MB of what it was under load; after,
 * everything settles with 0 lost and 0 stranded.
 */
import type { SwitchyardClient } from "../../../src/client/client.js";
import { check, produce, readQueue, waitSettled, type Scenario } from "./ledger.js";
import { sampleRss, sleep, startWorker, until, type ChaosRedis, type ServerProc } from "./procs.js";
import { Code, ServingStatus, declareReliable, recordHealth } from "./grpc.js";

/** Switchyard's default SWITCHYARD_REDIS_COMMAND_TIMEOUT, which the servers run with. */
const COMMAND_TIMEOUT_MS = 5000;

/** The fault: `start` begins it, `end` ends it after `faultMs`. */
export interface RedisFault {
  name: string;
  faultMs: number;
  start(): Promise<void> | void;
  end(): Promise<void> | void;
}

/** Runs `fault` against `server` (on `redis`) under load and records the checks and figures on `s`. */
export async function redisFaultUnderLoad(s: Scenario, redis: ChaosRedis, server: ServerProc, client: SwitchyardClient, fault: RedisFault): Promise<void> {
  const { ledger } = s;
  const q = `{s${s.id}}`;
  // A short min_idle: claims whose lease reply was lost in the fault come back by the watchdog within the scenario.
  await declareReliable(client, q, { minIdleMs: 5000 });
  const health = recordHealth(server.address);
  const rss = sampleRss(server);
  const producer = produce(ledger, client, q, { batch: 5, everyMs: 20 });
  for (const n of [1, 2]) startWorker(ledger, { name: `s${s.id}-w${n}`, addresses: [server.address], queue: q, credit: 10, delay: 5 });
  await until(() => ledger.ackedIds().size >= 200, 15_000);
  const rssBefore = rss.peakMb;

  ledger.note(fault.name);
  const from = Date.now();
  await fault.start();
  await sleep(fault.faultMs);
  const endedAt = Date.now();
  const failed = producer.failures.filter((f) => f.t >= from && f.t <= endedAt);
  const slowest = Math.max(0, ...failed.map((f) => f.ms));
  const notServing = health.firstAfter(ServingStatus.NOT_SERVING, from);
  ledger.note(`${fault.name} ends`);
  await fault.end();
  const back = await until(() => health.firstAfter(ServingStatus.SERVING, endedAt) !== undefined && producer.lastOkAt() > endedAt, 15_000);
  s.recoveryMs = back ? Math.max(health.firstAfter(ServingStatus.SERVING, endedAt)!, producer.lastOkAt()) - endedAt : undefined;
  s.failMs = failed[0] ? failed[0].t - from : undefined;
  s.health = health.summary(from);

  s.check(`calls fail during the ${fault.name}`, failed.length > 0, { failed: failed.length });
  s.check("every failure is UNAVAILABLE", failed.every((f) => f.code === Code.UNAVAILABLE), failed.slice(0, 5));
  s.check("the first call fails within the command timeout and 1 s", s.failMs !== undefined && s.failMs <= COMMAND_TIMEOUT_MS + 1000, { failMs: s.failMs });
  s.check("no call waits longer than the command timeout and 1 s", slowest <= COMMAND_TIMEOUT_MS + 1000, { slowest });
  // The readiness check runs every second and gives a PING a second: 2 s, and room for a busy machine.
  s.check("gRPC health turns NOT_SERVING within 3 s", notServing !== undefined && notServing - from <= 3000, { ms: notServing && notServing - from });
  s.check(`health SERVING and enqueues acknowledged again within 10 s of the ${fault.name}'s end`, back && s.recoveryMs! < 10_000, { recoveryMs: s.recoveryMs });

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
}
