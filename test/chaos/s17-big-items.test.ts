/**
 * Scenario 17: big items for stock workers (issue 17, Broken 1). The server
 * stores items up to 8 MiB (SWITCHYARD_MAX_ITEM_BYTES: headers count); two
 * worker processes lease with the TypeScript client as it comes, whose gRPC
 * channel receives at most 4 MiB, credit 10 each. The queue holds 30 items of
 * 1 MiB (payload limit), 150 small ones, and 4 items with a 5 MB header
 * scattered among them: no message to these workers can carry one of those.
 * Must hold: every other item is delivered and acked, in messages the workers
 * accept (no stream ends with RESOURCE_EXHAUSTED); the 4 go to the dead
 * letters alone, each with the reason; 0 lost, 0 stranded, no duplicates (no
 * stream failed, so nothing came twice).
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sampleRss, startChaosRedis, startServer, startWorker, type ChaosRedis } from "./harness/procs.js";
import { Code, declareReliable } from "./harness/grpc.js";

const MiB = 1024 * 1024;
const BIG_HEADER = 5_000_000;

const s = new Scenario("17", "big items for stock 4 MiB workers (1 MiB items, 5 MB headers)");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

it("items up to the worker's limit are delivered in messages it accepts; those over it are dead-lettered alone; nothing lost or stranded", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: false });
    const server = await startServer("s17-A", redis, { env: { SWITCHYARD_MAX_ITEM_BYTES: String(8 * MiB) } });
    client = new SwitchyardClient(server.address);
    const q = "{s17}";
    await declareReliable(client, q, { minIdleMs: 60_000 });
    const rss = sampleRss(server);
    const rssBefore = rss.peakMb;

    // 1 MiB items, small ones and the big ones, interleaved in the queue's order.
    const bigIds: string[] = [];
    for (let round = 0; round < 3; round++) {
      await ledger.enqueue(client, q, Array.from({ length: 10 }, (_, i) => Buffer.alloc(MiB, round * 10 + i)));
      await ledger.enqueue(client, q, Array.from({ length: 50 }, (_, i) => `s17-small-${round * 50 + i}`));
      const big = [{ payload: `s17-big-${round}`, headers: { pad: "x".repeat(BIG_HEADER) } }];
      bigIds.push(...(await ledger.enqueue(client, q, [big[0].payload], () => client!.enqueue(q, big))));
    }
    const last = [{ payload: "s17-big-3", headers: { pad: "x".repeat(BIG_HEADER) } }];
    bigIds.push(...(await ledger.enqueue(client, q, [last[0].payload], () => client!.enqueue(q, last))));

    const from = Date.now();
    for (const n of [1, 2]) startWorker(ledger, { name: `s17-w${n}`, addresses: [server.address], queue: q, credit: 10, delay: 5 });
    const settled = await waitSettled(ledger, redis.plain, [q], 40_000);
    s.recoveryMs = settled ? Date.now() - from : undefined;
    s.peakRssMb = rss.stop();

    const contents = await readQueue(redis.plain, q);
    const deadItems = (await redis.plain.lrangeBuffer(`${q}.dead`, 0, -1)).map(decodeItem);
    const failedStreams = ledger.workerEvents.filter((e) => e.e === "end" && e.code === Code.RESOURCE_EXHAUSTED);
    const bigDelivered = ledger.deliveries.filter((d) => bigIds.includes(d.id));
    s.check("everything settles", settled);
    s.check("the server process did not crash", server.alive());
    s.check("no stream ends with RESOURCE_EXHAUSTED (every delivery message fits 4 MiB)", failedStreams.length === 0, failedStreams.slice(0, 3));
    s.check("the 4 items with a 5 MB header, and only they, are dead-lettered", [...contents.dead].sort().join() === [...bigIds].sort().join(), {
      dead: contents.dead.length,
    });
    s.check("none of them reached a worker", bigDelivered.length === 0, bigDelivered.length);
    s.check(
      "each dead letter says why",
      deadItems.length === 4 && deadItems.every((d) => /cannot be delivered: .* at most 4194304 bytes/.test(d.lastError)),
      deadItems.map((d) => d.lastError.slice(0, 120)),
    );
    const f = check(ledger, [contents]);
    s.figuresFrom(f);
    s.stranded = f.inProcessing;
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("0 stranded in processing", f.inProcessing === 0, { inProcessing: f.inProcessing });
    s.check("no duplicates (no stream failed)", f.duplicates === 0, { duplicates: f.duplicates });
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.note(
      `${f.enqueued} items (30 × 1 MiB, 150 small, 4 with a 5 MB header): ${f.acked} acked, ${f.inDead} dead-lettered with the reason, ` +
        `drained in ${s.recoveryMs ?? "–"} ms; RSS ${Math.round(rssBefore)} → peak ${Math.round(s.peakRssMb)} MB`,
    );
  }));
