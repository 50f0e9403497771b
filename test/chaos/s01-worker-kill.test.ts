/**
 * Scenario 1: SIGKILL a worker holding k reliable items (a TypeScript worker
 * and the Python example). Must hold: 0 lost; each held item redelivered;
 * duplicates ≤ k; the delivery count rises. min_idle is 60 s, so the watchdog
 * cannot be what returns them: the server sees the dead worker's stream end.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, removePythonStubs, startChaosRedis, startPythonHolder, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { declareReliable } from "./harness/grpc.js";

const s = new Scenario("01", "SIGKILL a worker holding k items");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
  await removePythonStubs();
});

it("a killed worker's items come back at once, each redelivered with a higher delivery count", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const server = await startServer("s01-A", redis);
    client = new SwitchyardClient(server.address);
    const q = "{s01}";
    await declareReliable(client, q, { minIdleMs: 60_000 });

    // Two holders take k = 30 + 30 items and never settle them.
    await ledger.enqueue(client, q, Array.from({ length: 60 }, (_, i) => `held-${i}`));
    const py = await startPythonHolder(ledger, { name: "s01-py-holder", address: server.address, queue: q, n: 30 });
    const ts = startWorker(ledger, { name: "s01-ts-holder", addresses: [server.address], queue: q, credit: 30, mode: "hold" });
    await ts.waitFor((e) => e.e === "holding", 15_000, "holding");
    const held = [...py.ids, ...ledger.deliveries.filter((d) => d.worker === "s01-ts-holder").map((d) => d.id)];
    const k = held.length;
    s.check("the holders hold k = 60 distinct items", k === 60 && new Set(held).size === 60, { k });

    // Meanwhile the queue keeps flowing to two acking workers.
    await ledger.enqueue(client, q, Array.from({ length: 140 }, (_, i) => `work-${i}`));
    for (const n of [1, 2]) startWorker(ledger, { name: `s01-acker-${n}`, addresses: [server.address], queue: q, credit: 10, delay: 5 });
    await until(() => ledger.ackedIds().size >= 140, 15_000);

    ledger.note("SIGKILL holders");
    const killedAt = Date.now();
    py.child.kill("SIGKILL");
    ts.kill("SIGKILL");
    const redelivered = () => held.every((id) => ledger.deliveriesOf(id).length >= 2);
    const back = await until(redelivered, 10_000, 5);
    const lastRedelivery = Math.max(...held.map((id) => ledger.deliveriesOf(id)[1]?.t ?? Infinity));
    s.recoveryMs = back ? lastRedelivery - killedAt : undefined;
    s.check("every held item is redelivered within 10 s (min_idle is 60 s)", back);

    const settled = await waitSettled(ledger, redis.plain, [q], 15_000);
    s.check("everything settles", settled);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.check(`duplicates ≤ k (${k})`, f.duplicates <= k, { duplicates: f.duplicates });
    const counts = held.map((id) => ledger.deliveriesOf(id).filter((d) => d.count !== undefined).map((d) => d.count!));
    s.check("the delivery count rises on redelivery (1 → 2)", counts.every((c) => c[c.length - 1] >= 2), counts.slice(0, 5));
    s.note(`k=${k} (30 Python + 30 TS), ${f.enqueued} items`);
  }));
