/**
 * Scenario 10: SIGTERM a server mid-lease (graceful shutdown, SPEC S5). Must
 * hold: health NOT_SERVING first; no new leases (a new Lease stream is
 * UNAVAILABLE, an open one gets `drain` and no more deliveries); items in
 * flight settle within the grace period (SWITCHYARD_SHUTDOWN_GRACE); past it
 * the rest are returned; the scheduler releases its locks; the process exits
 * 0; 0 lost. And a second signal exits at once.
 */
import { afterAll, it } from "vitest";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { SwitchyardClient } from "../../src/client/client.js";
import { ExecutePolicy } from "../../src/gen/switchyard/v1/cron_pb.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { Code, HealthProbe, ServingStatus, declareReliable } from "./harness/grpc.js";

const cleanup: (() => unknown)[] = [];
afterAll(async () => {
  killStarted();
  for (const fn of cleanup.reverse()) await fn();
});

const GRACE_MS = 3000;

it("SIGTERM: NOT_SERVING first, no new leases, in-flight items settle within the grace, the rest are returned, exit 0", async () => {
  const s = new Scenario("10", "SIGTERM a server mid-lease");
  await s.run(async () => {
    const { ledger } = s;
    const redis: ChaosRedis = await startChaosRedis({ aof: true });
    cleanup.push(() => redis.stop());
    // A cron job whose runs never finish (an HTTP target that does not answer), so that its lock is held.
    const slow = createServer(() => undefined);
    await new Promise<void>((ok) => slow.listen(0, "127.0.0.1", ok));
    const slowPort = (slow.address() as AddressInfo).port;
    cleanup.push(() => (slow.closeAllConnections(), slow.close()));
    const env = { SWITCHYARD_SHUTDOWN_GRACE: `${GRACE_MS}ms`, SWITCHYARD_HTTP_ALLOW: `127.0.0.1:${slowPort}` };
    const a = await startServer("s10-A", redis, { env });
    const toA = new SwitchyardClient(a.address, { timeoutMs: 2000 });
    const health = new HealthProbe(a.address);
    cleanup.push(() => (toA.close(), health.close()));
    const job = await toA.createJob({ name: "never ends", target: `http://127.0.0.1:${slowPort}/slow`, schedule: "* * * * * *", executePolicy: ExecutePolicy.SINGLETON });
    await toA.resumeJob(job.id);
    const lockKey = `{switchyard}:job:lock:${job.id}`;
    const lockOwner = async () => ((await redis.plain.get(lockKey)) ?? "").split(":")[0];
    s.check("A runs the job and holds its lock", await until(async () => (await lockOwner()) === "s10-A", 5000, 50));
    // B starts only now, so the lock A holds is one B waits for.
    const b = await startServer("s10-B", redis, { env });
    const toB = new SwitchyardClient(b.address);
    cleanup.push(() => toB.close());
    const q = "{s10}";
    await declareReliable(toB, q, { minIdleMs: 30_000 });
    await ledger.enqueue(toB, q, Array.from({ length: 60 }, (_, i) => `item-${i}`));

    // On A: a worker whose items take 1 s each (they settle within the grace), and one that never settles.
    const settler = startWorker(ledger, { name: "s10-settler", addresses: [a.address, b.address], queue: q, credit: 5, delay: 1000 });
    const holder = startWorker(ledger, { name: "s10-holder", addresses: [a.address, b.address], queue: q, credit: 5, mode: "hold" });
    await holder.waitFor((e) => e.e === "holding", 10_000, "holding");
    await until(() => ledger.deliveries.filter((d) => d.worker === "s10-settler").length >= 5, 10_000);
    const healthTimes: { status: number; t: number }[] = [];
    const unwatch = health.watch((status, t) => healthTimes.push({ status, t }));
    await until(() => healthTimes.some((h) => h.status === ServingStatus.SERVING), 2000);
    await sleep(300); // the settler is mid-item

    ledger.note("SIGTERM A");
    const termAt = Date.now();
    a.kill("SIGTERM");
    // A new Lease stream on A is refused.
    await sleep(100);
    const late = toA.lease(q, 1);
    const lateOpen = await late.opened.then(() => 0, (err: { code?: number }) => err.code ?? -1);
    late.cancel();
    s.check("a new Lease stream on the draining server is UNAVAILABLE", lateOpen === Code.UNAVAILABLE, { code: lateOpen });

    const { code, signal } = await a.exited;
    const exitAt = Date.now();
    unwatch();
    s.check("A exits 0", code === 0 && signal === null, { code, signal });
    s.check(`A exits within the grace plus 3 s (${GRACE_MS + 3000} ms)`, exitAt - termAt < GRACE_MS + 3000, { ms: exitAt - termAt });
    // A's scheduler released the job's lock (its TTL is 300 s): B takes it at one of the next ticks.
    const takenByB = await until(async () => (await lockOwner()) === "s10-B", 2500, 50);
    s.check("A releases its cron lock on the way out: B holds it within 2.5 s of A's exit", takenByB, { owner: await lockOwner() });
    await toB.pauseJob(job.id);

    const notServing = healthTimes.find((h) => h.status === ServingStatus.NOT_SERVING && h.t >= termAt);
    const drains = [settler, holder].map((w) => w.events.find((e) => e.e === "drain" && e.t >= termAt));
    s.check("health turns NOT_SERVING at once (< 500 ms)", !!notServing && notServing.t - termAt < 500, { ms: notServing && notServing.t - termAt });
    s.check("both lease streams on A get a drain notice", drains.every(Boolean), drains);
    s.check(
      "NOT_SERVING comes first (no later than the drain notices, 20 ms tolerance across processes)",
      !!notServing && drains.every((d) => d && notServing.t <= d.t + 20),
      { notServing: notServing?.t, drains: drains.map((d) => d?.t) },
    );
    // No delivery on A's streams after their drain notice.
    const aStreams = [settler, holder].map((w) => ({ w: w.name, s: w.events.find((e) => e.e === "drain" && e.t >= termAt)?.s, t: w.events.find((e) => e.e === "drain" && e.t >= termAt)?.t ?? termAt }));
    const afterDrain = ledger.deliveries.filter((d) => aStreams.some((x) => x.w === d.worker && x.s === d.stream && d.t > x.t));
    s.check("no delivery on a draining stream", afterDrain.length === 0, afterDrain);

    // The settler's items in flight at the signal were acked on their stream and never delivered again.
    const inflight = ledger.deliveries.filter((d) => d.worker === "s10-settler" && d.t < termAt && !ledger.settles.some((x) => x.tok === d.tok && x.t < termAt));
    const settledInGrace = inflight.filter((d) => ledger.settles.some((x) => x.tok === d.tok && x.via === "stream" && x.ok !== false && x.t < termAt + GRACE_MS));
    s.check("the items in flight settle within the grace, on their stream", inflight.length > 0 && settledInGrace.length === inflight.length, {
      inflight: inflight.length,
      settled: settledInGrace.length,
    });
    s.check("they are not delivered again", inflight.every((d) => ledger.deliveriesOf(d.id).length === 1));
    // The holder's items are returned once the grace is over, then leased again (on B).
    const held = ledger.deliveries.filter((d) => d.worker === "s10-holder" && d.t < termAt);
    const back = await until(() => held.every((d) => ledger.deliveriesOf(d.id).length >= 2), 10_000, 10);
    const backAt = Math.max(...held.map((d) => ledger.deliveriesOf(d.id)[1]?.t ?? Infinity));
    s.recoveryMs = back ? backAt - termAt : undefined;
    s.check("the unsettled items are returned past the grace (and leased again)", back && backAt - termAt >= GRACE_MS - 100, { ms: backAt - termAt });

    holder.kill("SIGKILL");
    startWorker(ledger, { name: "s10-fast", addresses: [b.address], queue: q, credit: 10, delay: 5 });
    const settled = await waitSettled(ledger, redis.plain, [q], 15_000);
    s.check("everything settles", settled);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.note(`A exited ${exitAt - termAt} ms after SIGTERM (grace ${GRACE_MS} ms); ${settledInGrace.length} in-flight items settled in the grace; held items back after ${backAt - termAt} ms`);
  });
});

it("a second signal exits at once; the held items are recovered later by the watchdog", async () => {
  const s = new Scenario("10b", "second SIGTERM exits at once");
  await s.run(async () => {
    const { ledger } = s;
    const redis: ChaosRedis = await startChaosRedis({ aof: true });
    cleanup.push(() => redis.stop());
    const env = { SWITCHYARD_SHUTDOWN_GRACE: "20s", SWITCHYARD_WATCHDOG_INTERVAL: "250ms" };
    const [c, d] = await Promise.all([startServer("s10b-C", redis, { env }), startServer("s10b-D", redis, { env })]);
    const toD = new SwitchyardClient(d.address);
    cleanup.push(() => toD.close());
    const q = "{s10b}";
    await declareReliable(toD, q, { minIdleMs: 2000 });
    await ledger.enqueue(toD, q, Array.from({ length: 20 }, (_, i) => `item-${i}`));
    const holder = startWorker(ledger, { name: "s10b-holder", addresses: [c.address], queue: q, credit: 5, mode: "hold" });
    await holder.waitFor((e) => e.e === "holding", 10_000, "holding");

    c.kill("SIGTERM");
    await sleep(300);
    s.check("after the first SIGTERM, C is still draining (grace 20 s)", c.alive());
    const secondAt = Date.now();
    c.kill("SIGTERM");
    const { code, signal } = await c.exited;
    const exitMs = Date.now() - secondAt;
    s.recoveryMs = exitMs;
    s.check("the second SIGTERM exits at once (< 1 s)", exitMs < 1000, { exitMs, code, signal });
    holder.kill("SIGKILL");
    startWorker(ledger, { name: "s10b-fast", addresses: [d.address], queue: q, credit: 10, delay: 5 });
    const settled = await waitSettled(ledger, redis.plain, [q], 15_000);
    s.check("everything settles (the watchdog recovers what C's streams held)", settled);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.note(`exit code ${code} ${exitMs} ms after the second signal`);
  });
});
