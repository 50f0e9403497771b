/**
 * Scenario 5: a worker's stream is cut by a TCP proxy between it and the
 * server. Must hold: the items in flight on the cut stream are back at once
 * (min_idle is 60 s, so not by the watchdog); 0 lost; the worker reconnects.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, startWorker, until, type ChaosRedis } from "./harness/procs.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";
import { declareReliable } from "./harness/grpc.js";

const s = new Scenario("05", "worker stream cut by the proxy");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;
let proxy: TcpProxy | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await proxy?.close();
  await redis?.stop();
});

it("a cut stream's items are back at once and the worker reconnects", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: true });
    const server = await startServer("s05-A", redis);
    client = new SwitchyardClient(server.address);
    proxy = await startProxy(server.address);
    const q = "{s05}";
    await declareReliable(client, q, { minIdleMs: 60_000 });
    await ledger.enqueue(client, q, Array.from({ length: 100 }, (_, i) => `item-${i}`));

    // A slow worker behind the proxy holds 20 items (2 s each) when its connection is cut.
    const slow = startWorker(ledger, { name: "s05-behind-proxy", addresses: [proxy.address], queue: q, credit: 20, delay: 2000 });
    await until(() => ledger.deliveries.filter((d) => d.worker === "s05-behind-proxy").length >= 20, 10_000);
    const held = ledger.deliveries.filter((d) => d.worker === "s05-behind-proxy").map((d) => d.id);
    s.check("the worker holds 20 items when the proxy cuts its connection", held.length === 20, { held: held.length });

    ledger.note("proxy cut");
    const cutAt = Date.now();
    const cut = proxy.cut();
    s.check("the proxy cut the worker's connection", cut >= 1, { cut });
    // Back = in the queue list again, or leased again.
    let backAt = 0;
    const back = await until(
      async () => {
        const queued = new Set((await readQueue(redis!.plain, q)).queue);
        const ok = held.every((id) => queued.has(id) || ledger.deliveriesOf(id).length >= 2);
        if (ok) backAt = Date.now();
        return ok;
      },
      5000,
      5,
    );
    s.recoveryMs = back ? backAt - cutAt : undefined;
    s.check("the cut stream's 20 items are back within 1 s", back && backAt - cutAt < 1000, { ms: backAt - cutAt });

    const reconnected = await until(() => slow.events.some((e) => e.e === "opened" && e.t > cutAt), 5000, 10);
    s.check("the worker reconnects through the proxy", reconnected);
    // A fast worker drains the rest.
    startWorker(ledger, { name: "s05-fast", addresses: [server.address], queue: q, credit: 5, delay: 5 });
    const settled = await waitSettled(ledger, redis.plain, [q], 20_000);
    s.check("everything settles", settled);
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("no item in two places", f.misplaced.length === 0, f.misplaced);
    s.check("duplicates ≤ the cut stream's credit (20)", f.duplicates <= 20, { duplicates: f.duplicates });
    const refused = ledger.settles.filter((x) => x.ok === false).length;
    s.note(`${f.enqueued} items; the worker's late acks of the 20 returned items: ${refused} refused`);
  }));
