/**
 * Scenario 9: a backlog of 100,000 items and 10 worker processes, no faults.
 * Must hold: 0 lost, 0 duplicates; the server's RSS stays under 300 MB
 * (sampled from /proc every 100 ms, while enqueuing and while draining).
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, startWorker, type ChaosRedis } from "./harness/procs.js";
import { declareReliable } from "./harness/grpc.js";

const s = new Scenario("09", "backlog of 100,000, 10 workers");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

const ITEMS = Number(process.env.CHAOS_BACKLOG ?? 100_000);
const RSS_LIMIT = 300 * 1024 * 1024;

it("drains a 100,000-item backlog with 10 workers: 0 lost, 0 duplicates, RSS < 300 MB", () =>
  s.run(async () => {
    const { ledger } = s;
    const testStart = Date.now();
    // AOF with fsync every second: no fault here, and `always` would measure the disk (one fsync per write).
    redis = await startChaosRedis({ aof: true, fsync: "everysec" });
    const server = await startServer("s09-A", redis);
    client = new SwitchyardClient(server.address);
    const q = "{s09}";
    await declareReliable(client, q, { minIdleMs: 60_000 });
    let maxRss = server.rss();
    const sampler = setInterval(() => (maxRss = Math.max(maxRss, server.rss())), 100);
    try {
      const enqueueStart = Date.now();
      const payload = "x".repeat(100);
      for (let i = 0; i < ITEMS; i += 1000) await ledger.enqueue(client, q, Array.from({ length: Math.min(1000, ITEMS - i) }, () => payload));
      const enqueueMs = Date.now() - enqueueStart;
      s.check(`all ${ITEMS} enqueues acknowledged`, ledger.enqueued.size === ITEMS, { enqueued: ledger.enqueued.size });

      const drainStart = Date.now();
      for (let n = 1; n <= 10; n++) startWorker(ledger, { name: `s09-w${n}`, addresses: [server.address], queue: q, credit: 100 });
      // Whatever is left of the scenario's minute (less 5 s to check and stop).
      const budget = 55_000 - (Date.now() - testStart);
      const settled = await waitSettled(ledger, redis.plain, [q], budget);
      const drainMs = Date.now() - drainStart;
      s.check(`the backlog drains within the scenario's minute (${Math.round(budget / 1000)} s left for it)`, settled, { drainMs });
      const f = check(ledger, [await readQueue(redis.plain, q)]);
      s.figuresFrom(f);
      s.check("0 lost", f.lost === 0, { lost: f.lost, sample: f.lostIds });
      s.check("0 duplicates", f.duplicates === 0, { duplicates: f.duplicates });
      s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
      s.check("server RSS stays under 300 MB", maxRss < RSS_LIMIT, { maxRssMB: Math.round(maxRss / 2 ** 20) });
      s.figures.throughput = { enqueueMs, drainMs, perSecond: Math.round(ITEMS / (drainMs / 1000)), maxRssMB: Math.round(maxRss / 2 ** 20) };
      s.note(`enqueue ${enqueueMs} ms, drain ${drainMs} ms (${Math.round(ITEMS / (drainMs / 1000))}/s), max server RSS ${Math.round(maxRss / 2 ** 20)} MB`);
    } finally {
      clearInterval(sampler);
    }
  }));
