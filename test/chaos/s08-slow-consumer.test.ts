/**
 * Scenario 8: a slow consumer with credit 1. Must hold: it never holds more
 * than its credit; the other workers drain the rest. Redis is sampled too: the
 * processing list never holds more than the open credit of all streams.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario, type Ledger } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, startWorker, type ChaosRedis } from "./harness/procs.js";
import { declareReliable } from "./harness/grpc.js";

const s = new Scenario("08", "slow consumer, credit 1");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

/** The most items a worker held at once, by its own event order (deliveries less settles sent). */
function maxHeld(ledger: Ledger, worker: string): number {
  let held = 0;
  let max = 0;
  const events = [
    ...ledger.deliveries.filter((d) => d.worker === worker).map((d) => ({ t: d.t, k: 1, seq: 0 })),
    ...ledger.settles.filter((x) => x.worker === worker).map((x) => ({ t: x.t, k: -1, seq: 1 })),
  ];
  // Same-millisecond ties: count the delivery first (the pessimistic order).
  events.sort((a, b) => a.t - b.t || a.seq - b.seq);
  for (const e of events) {
    held += e.k;
    max = Math.max(max, held);
  }
  return max;
}

it("a credit-1 consumer never holds more than one item while the others drain the queue", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const server = await startServer("s08-A", redis);
    client = new SwitchyardClient(server.address);
    const q = "{s08}";
    await declareReliable(client, q, { minIdleMs: 60_000 });
    await ledger.enqueue(client, q, Array.from({ length: 300 }, (_, i) => `item-${i}`));

    const startedAt = Date.now();
    startWorker(ledger, { name: "s08-slow", addresses: [server.address], queue: q, credit: 1, delay: 1000 });
    startWorker(ledger, { name: "s08-fast-1", addresses: [server.address], queue: q, credit: 10, delay: 10 });
    startWorker(ledger, { name: "s08-fast-2", addresses: [server.address], queue: q, credit: 10, delay: 10 });
    let maxProcessing = 0;
    const sampler = setInterval(() => {
      void redis!.plain.llen(`${q}.processing`).then((n) => (maxProcessing = Math.max(maxProcessing, n)), () => undefined);
    }, 10);
    const settled = await waitSettled(ledger, redis.plain, [q], 20_000);
    clearInterval(sampler);
    const tookMs = Date.now() - startedAt;
    s.check("everything settles", settled);

    const slowHeld = maxHeld(ledger, "s08-slow");
    const byWorker = (w: string) => ledger.settles.filter((x) => x.worker === w).length;
    s.check("the slow consumer never holds more than its credit (1)", slowHeld <= 1, { slowHeld });
    s.check("the fast consumers never hold more than their credit (10)", maxHeld(ledger, "s08-fast-1") <= 10 && maxHeld(ledger, "s08-fast-2") <= 10);
    s.check("the processing list never exceeds the open credit (21)", maxProcessing <= 21, { maxProcessing });
    s.check(
      "the slow consumer handles no more than its pace allows",
      byWorker("s08-slow") <= Math.ceil(tookMs / 1000) + 1,
      { slow: byWorker("s08-slow"), tookMs },
    );
    s.check("the others drain the rest", byWorker("s08-fast-1") + byWorker("s08-fast-2") >= 300 - byWorker("s08-slow"));
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("0 duplicates", f.duplicates === 0, { duplicates: f.duplicates });
    s.note(`300 items in ${tookMs} ms: slow ${byWorker("s08-slow")}, fast ${byWorker("s08-fast-1")} + ${byWorker("s08-fast-2")}; max processing ${maxProcessing}`);
  }));
