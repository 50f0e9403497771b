/**
 * Scenario 2: SIGKILL server A mid-lease while A and B share one Redis.
 * Must hold: workers reconnect to B; A's leases are recovered (by the
 * watchdog, min_idle later: nobody is left to return them); 0 lost; a late
 * ack with an old token is refused (and leaves the new holder's copy alone).
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, produce, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { Code, codeOf, declareReliable } from "./harness/grpc.js";

const s = new Scenario("02", "SIGKILL server A mid-lease");
let redis: ChaosRedis | undefined;
const clients: SwitchyardClient[] = [];

afterAll(async () => {
  killStarted();
  clients.forEach((c) => c.close());
  await redis?.stop();
});

it("workers move to B, A's leases are recovered, a late ack with an old token is refused", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const env = { SWITCHYARD_WATCHDOG_INTERVAL: "250ms" };
    const [a, b] = await Promise.all([startServer("s02-A", redis, { env }), startServer("s02-B", redis, { env })]);
    const toA = new SwitchyardClient(a.address);
    const toB = new SwitchyardClient(b.address);
    clients.push(toA, toB);
    const q = "{s02}";
    const minIdleMs = 2000;
    await declareReliable(toB, q, { minIdleMs });

    // Load: a producer on B; three workers that prefer A (B is their fallback).
    const producer = produce(ledger, toB, q, { batch: 5, everyMs: 25 });
    const workers = [1, 2, 3].map((n) =>
      startWorker(ledger, { name: `s02-w${n}`, addresses: [a.address, b.address], queue: q, credit: 10, delay: 100 }),
    );
    await until(() => ledger.ackedIds().size >= 100, 15_000);
    // A stalled worker of our own on A: takes 5 items and never settles them.
    const staller = toA.lease(q, 5);
    const stalled = await staller.take(5);
    for (const d of stalled) ledger.delivered("s02-staller", d);

    ledger.note("SIGKILL A");
    const killedAt = Date.now();
    a.kill("SIGKILL");
    await a.exited;
    staller.cancel();

    // Every worker opens a stream on B.
    const moved = await until(
      () => workers.every((w) => w.events.some((e) => e.e === "opened" && e.addr === b.address && e.t >= killedAt)),
      10_000,
      10,
    );
    const reopened = Math.max(...workers.map((w) => w.events.find((e) => e.e === "opened" && e.addr === b.address && e.t >= killedAt)?.t ?? Infinity));
    s.recoveryMs = moved ? reopened - killedAt : undefined;
    s.check("every worker reconnects to B", moved);

    // The stalled items were leased through A, which is gone: the watchdog on B recovers them after min_idle.
    const redelivered = (id: string) => ledger.deliveriesOf(id).some((d) => d.worker !== "s02-staller");
    const late: { id: string; code: number; at: number }[] = [];
    const pendingLate = new Set(stalled.map((d) => d.id));
    const recovered = await until(
      async () => {
        for (const d of stalled) {
          if (pendingLate.has(d.id) && redelivered(d.id)) {
            // The item is leased again (its new holder takes 100 ms): ack it now with A's old token.
            pendingLate.delete(d.id);
            const code = await codeOf(toB.ack(d.leaseToken));
            late.push({ id: d.id, code, at: Date.now() });
            ledger.acked("s02-staller", d.id, d.leaseToken, "unary", code === 0, code);
          }
        }
        return pendingLate.size === 0;
      },
      minIdleMs + 8000,
      5,
    );
    const recoveredAt = Math.max(...stalled.map((d) => ledger.deliveriesOf(d.id).find((x) => x.worker !== "s02-staller")?.t ?? Infinity));
    s.check("A's stalled leases are recovered and delivered again (on B)", recovered, { recoveredAfterMs: recoveredAt - killedAt });
    const idle = stalled.map((d) => {
      const [first, again] = [ledger.deliveriesOf(d.id).find((x) => x.worker === "s02-staller")!, ledger.deliveriesOf(d.id).find((x) => x.worker !== "s02-staller")];
      return (again?.t ?? Infinity) - first.t;
    });
    s.check("no stalled lease is recovered before min_idle", idle.every((ms) => ms >= minIdleMs - 50), idle);
    s.check("late acks with A's old tokens are FAILED_PRECONDITION", late.length === 5 && late.every((l) => l.code === Code.FAILED_PRECONDITION), late);

    await sleep(500);
    await producer.stop();
    const settled = await waitSettled(ledger, redis.plain, [q], 15_000);
    s.check("everything settles", settled);
    // The late ack must not have taken the copy its new holder had: that holder's ack was accepted.
    const refusedNewHolders = ledger.settles.filter((x) => stalled.some((d) => d.id === x.id) && x.worker !== "s02-staller" && x.ok === false);
    s.check("the new holders' acks of the recovered items are accepted", refusedNewHolders.length === 0, refusedNewHolders);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.check("B kept serving", b.alive());
    const inflight = 3 * 10 + 5;
    s.check(`duplicates ≤ items in flight on A (${inflight})`, f.duplicates <= inflight, { duplicates: f.duplicates });
    s.note(`${f.enqueued} items; stalled leases recovered ${recoveredAt - killedAt} ms after the kill (min_idle ${minIdleMs} ms)`);
  }));
