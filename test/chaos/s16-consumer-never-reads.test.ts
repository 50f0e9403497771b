/**
 * Scenario 16: three workers open Lease streams with credit 2,000 on a queue
 * of 100 KB items and never read a byte (plain HTTP/2, their stream windows
 * stay shut), beside a worker that acks. The server runs with a 4 MiB bound
 * per stream (SWITCHYARD_LEASE_STREAM_BUFFER_BYTES) and batches of 16, so the
 * bound shows on 600 items. Must hold: each stuck stream is given about its
 * bound, not its credit; the acking worker takes the rest; the bytes the
 * server holds for them stay within the bounds (its RSS is reported); once the
 * stuck workers go, their items come back and are delivered; 0 lost, 0 stranded.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sampleRss, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { declareReliable, recordHealth } from "./harness/grpc.js";
import { rawLease, type RawLease } from "../helpers/raw-lease.js";
import { scrape } from "../helpers/http.js";

const ITEMS = 600;
const ITEM_BYTES = 100_000;
const BOUND = 4 * 1024 * 1024;
const BATCH = 16;

const s = new Scenario("16", "consumers that never read (credit 2,000, 100 KB items)");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;
const stuck: RawLease[] = [];

afterAll(async () => {
  for (const c of stuck) c.close();
  killStarted();
  client?.close();
  await redis?.stop();
});

it("consumers that never read hold about their byte bound, not their credit; the others drain the queue; nothing lost or stranded", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: false });
    const server = await startServer("s16-A", redis, {
      env: { SWITCHYARD_LEASE_STREAM_BUFFER_BYTES: String(BOUND), SWITCHYARD_LEASE_BATCH: String(BATCH) },
    });
    // Items go in through another instance, so the RSS measured is the lease side's alone.
    const producer = await startServer("s16-B", redis);
    client = new SwitchyardClient(producer.address);
    const q = "{s16}";
    await declareReliable(client, q, { minIdleMs: 60_000 });
    for (let i = 0; i < ITEMS; i += 100) {
      await ledger.enqueue(client, q, Array.from({ length: 100 }, (_, j) => `s16-${i + j}-`.padEnd(ITEM_BYTES, "x")));
    }
    const health = recordHealth(server.address);
    const rssBefore = server.rss() / 1024 / 1024;
    const rss = sampleRss(server);
    const from = Date.now();
    for (let i = 0; i < 3; i++) {
      const c = rawLease(server.address, { read: false });
      stuck.push(c);
      c.send({ case: "open", value: { queue: q, credit: 2000 } });
    }
    await until(async () => (await redis!.plain.llen(`${q}.processing`)) >= 3 * BATCH, 10_000);
    startWorker(ledger, { name: "s16-worker", addresses: [server.address], queue: q, credit: 20, delay: 0 });
    // The worker takes everything the stuck streams are not given: then the queue is empty and only theirs are in processing.
    const drained = await until(async () => (await redis!.plain.llen(q)) === 0 && ledger.ackedIds().size + (await redis!.plain.llen(`${q}.processing`)) === ITEMS, 30_000, 100);
    const held = await redis.plain.llen(`${q}.processing`);
    const heldPeakRss = rss.peakMb;
    await until(() => server.httpAddress() !== undefined, 5000);
    const buffered = (await scrape(server.httpAddress()!)).get("switchyard_lease_buffered_bytes") ?? NaN;
    s.check("the acking worker takes everything the stuck streams were not given", drained, { acked: ledger.ackedIds().size, held });
    // Per stuck stream: the bound, one batch, and what flow control let through.
    const perStream = Math.ceil(BOUND / ITEM_BYTES) + BATCH + 10;
    s.check(`the stuck streams hold at most ${3 * perStream} items (about 3 × their 4 MiB bound), not 3 × 2,000`, held <= 3 * perStream, { held });
    s.check("the server holds at most 3 × (bound + one batch) of deliveries not taken (switchyard_lease_buffered_bytes)", buffered <= 3 * (BOUND + BATCH * (ITEM_BYTES + 200)), {
      buffered,
    });

    // The stuck workers go: their items come back at once and the worker takes them.
    ledger.note("stuck consumers disconnect");
    const goneAt = Date.now();
    for (const c of stuck) c.close();
    const settled = await waitSettled(ledger, redis.plain, [q], 20_000);
    s.recoveryMs = settled ? Date.now() - goneAt : undefined;
    s.peakRssMb = rss.stop();
    s.health = health.summary(from);
    health.stop();
    s.check("everything settles once they are gone", settled);
    s.check("the server process did not crash", server.alive());
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.stranded = f.inProcessing;
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("0 stranded in processing", f.inProcessing === 0, { inProcessing: f.inProcessing });
    s.note(
      `${ITEMS} items of 100 KB: the 3 stuck streams held ${held} items, ${(buffered / 1048576).toFixed(1)} MB not taken ` +
        `(the worker acked the others meanwhile); RSS ${Math.round(rssBefore)} → ${Math.round(heldPeakRss)} MB meanwhile`,
    );
  }));
