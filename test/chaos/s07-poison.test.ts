/**
 * Scenario 7: a poison item. Must hold: it is delivered exactly max_deliveries
 * times, then dead-lettered; the items behind it keep flowing (no head-of-line
 * blocking). Two kinds of poison: one every worker retries (its handler
 * throws), and one that crashes every worker that takes it (the process exits;
 * a supervisor, here the test, starts a new one).
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, startWorker, until, type ChaosRedis, type WorkerProc } from "./harness/procs.js";
import { declareReliable } from "./harness/grpc.js";

const s = new Scenario("07", "poison item");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;
let stopped = false;

afterAll(async () => {
  stopped = true;
  killStarted();
  client?.close();
  await redis?.stop();
});

const MAX = 3;

it("a poison item is delivered exactly max_deliveries times, then dead-lettered, without blocking the queue", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const server = await startServer("s07-A", redis);
    client = new SwitchyardClient(server.address);

    for (const kind of ["retry", "crash"] as const) {
      const q = `{s07-${kind}}`;
      await declareReliable(client, q, { minIdleMs: 30_000, maxDeliveries: MAX });
      const [poisonId] = await ledger.enqueue(client, q, ["poison"]);
      await ledger.enqueue(client, q, Array.from({ length: 100 }, (_, i) => `ok-${i}`));
      const workers: WorkerProc[] = [];
      let generation = 0;
      const spawnWorker = (n: number) => {
        const w = startWorker(ledger, {
          name: `s07-${kind}-w${n}-g${generation++}`,
          addresses: [server.address],
          queue: q,
          credit: kind === "crash" ? 1 : 5,
          delay: 20,
          poison: kind,
          crashDelay: 300,
        });
        workers.push(w);
        // The supervisor: a worker that crashed is replaced.
        void w.exited.then(() => {
          if (!stopped && kind === "crash" && workers.length < 20) spawnWorker(n);
        });
      };
      for (const n of [1, 2, 3]) spawnWorker(n);
      const normalIds = [...ledger.enqueued.keys()].filter((id) => id !== poisonId && ledger.deliveriesOf(id).length === 0);
      const done = await until(async () => (await readQueue(redis!.plain, q)).dead.includes(poisonId), 20_000, 20);
      s.check(`${kind}: the poison item reaches the dead-letter list`, done);
      const settled = await waitSettled(ledger, redis.plain, [q], 15_000);
      s.check(`${kind}: everything else settles`, settled);
      stopped = kind === "crash";
      for (const w of workers) w.kill("SIGKILL");

      const poison = ledger.deliveriesOf(poisonId);
      s.check(`${kind}: the poison item is delivered exactly ${MAX} times`, poison.length === MAX, poison.map((d) => d.count));
      s.check(
        `${kind}: its delivery counts are 1..${MAX}`,
        JSON.stringify(poison.map((d) => d.count)) === JSON.stringify(Array.from({ length: MAX }, (_, i) => i + 1)),
        poison.map((d) => d.count),
      );
      // No head-of-line blocking: normal items are acked while the poison is still going round.
      const first = poison[0]?.t ?? 0;
      const last = poison[poison.length - 1]?.t ?? 0;
      const ackedMeanwhile = ledger.settles.filter((x) => x.action === "ack" && normalIds.includes(x.id) && x.t > first && x.t < last).length;
      s.check(`${kind}: other items are acked while the poison goes round`, ackedMeanwhile > 0, { ackedMeanwhile, poisonRoundMs: last - first });
      const f = check(ledger, [await readQueue(redis.plain, q)]);
      s.check(`${kind}: 0 lost`, f.lost === 0, f.lostIds);
      s.check(`${kind}: only the poison is dead-lettered`, f.inDead === 1, { inDead: f.inDead });
      s.check(`${kind}: all 100 other items acked`, normalIds.every((id) => ledger.ackedIds().has(id)));
      s.figures[kind] = f;
      s.lost = (s.lost ?? 0) + f.lost;
      s.duplicates = (s.duplicates ?? 0) + f.duplicates;
      s.note(`${kind}: ${ackedMeanwhile} items acked during the poison's ${last - first} ms round, ${f.duplicates} duplicates (the poison's)`);
    }
  }));
