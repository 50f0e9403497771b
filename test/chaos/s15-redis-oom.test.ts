/**
 * Scenario 15: Redis runs out of memory (maxmemory, noeviction) under a
 * producer whose items nobody takes yet. Must hold: enqueues are refused with
 * RESOURCE_EXHAUSTED naming Redis's reason (not INTERNAL), and none of a
 * refused call's items is ever stored or delivered (no partial batch); the
 * server stays up and SERVING; once Redis has room (an operator raises
 * maxmemory) enqueues are taken and workers drain the queue; 0 lost, 0 stranded.
 *
 * Leasing stops under OOM too (noted, not checked): lease.lua's first write,
 * LMOVE, is refused while Redis is over maxmemory, so workers cannot drain a
 * full Redis by themselves. Settles still apply (their first writes free memory).
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { check, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sampleRss, sleep, startChaosRedis, startServer, startWorker, until, type ChaosRedis, type WorkerProc } from "./harness/procs.js";
import { Code, declareReliable, recordHealth } from "./harness/grpc.js";

const s = new Scenario("15", "Redis out of memory (maxmemory, noeviction)");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

/** A payload that names itself in its first 16 bytes (what the chaos worker reports of a delivery). */
const payload = (n: number) => `oom-${String(n).padStart(7, "0")}-${"x".repeat(2000)}`;
const nameOf = (p: string) => p.slice(0, 11);

it("Redis out of memory refuses enqueues with RESOURCE_EXHAUSTED and its reason, writes nothing of them, and recovers once Redis has room", () =>
  s.run(async () => {
    const { ledger } = s;
    redis = await startChaosRedis({ aof: false });
    const server = await startServer("s15-A", redis);
    client = new SwitchyardClient(server.address, { timeoutMs: 10_000 });
    const q = "{s15}";
    await declareReliable(client, q, { minIdleMs: 5000 });
    const health = recordHealth(server.address);
    const rss = sampleRss(server);
    const used = Number(/used_memory:(\d+)/.exec(await redis.plain.info("memory"))![1]);
    await redis.plain.config("SET", "maxmemory-policy", "noeviction");
    await redis.plain.config("SET", "maxmemory", String(used + 8 * 1024 * 1024)); // room for ~3,000 items of 2 KB

    // A producer of 20-item calls, nobody consuming: Redis fills up.
    const refused = new Set<string>();
    const refusals: { t: number; code?: number; message: string }[] = [];
    let n = 0;
    let stopped = false;
    let lastOk = 0;
    const from = Date.now();
    const producing = (async () => {
      while (!stopped) {
        const payloads = Array.from({ length: 20 }, () => payload(n++));
        try {
          await ledger.enqueue(client!, q, payloads);
          lastOk = Date.now();
        } catch (err) {
          const e = err as { code?: number; details?: string };
          refusals.push({ t: Date.now(), code: e.code, message: e.details ?? String(err) });
          for (const p of payloads) refused.add(nameOf(p));
        }
        await sleep(10);
      }
    })();
    const full = await until(() => refusals.length >= 20, 30_000);
    s.check("Redis fills up and enqueues are refused", full, { refusals: refusals.length, accepted: ledger.enqueued.size });
    s.failMs = refusals[0] ? refusals[0].t - from : undefined;
    s.check("every refusal is RESOURCE_EXHAUSTED", refusals.every((r) => r.code === Code.RESOURCE_EXHAUSTED), refusals.slice(0, 3));
    s.check("every refusal names Redis's reason", refusals.every((r) => /OOM command not allowed when used memory > 'maxmemory'/.test(r.message)), refusals[0]);

    // Workers start while Redis is full: they lease nothing until it has room.
    ledger.note("workers start");
    const workers: WorkerProc[] = [1, 2].map((i) => startWorker(ledger, { name: `s15-w${i}`, addresses: [server.address], queue: q, credit: 20, delay: 0 }));
    await sleep(3000);
    const leasedWhileFull = ledger.deliveries.length;
    ledger.note("maxmemory raised");
    const roomAt = Date.now();
    await redis.plain.config("SET", "maxmemory", "0");
    const recovered = await until(() => lastOk > roomAt, 10_000);
    s.recoveryMs = recovered ? lastOk - roomAt : undefined;
    s.check("enqueues are taken again within 2 s once Redis has room", recovered && s.recoveryMs! < 2000, { recoveryMs: s.recoveryMs });
    stopped = true;
    await producing;
    const settled = await waitSettled(ledger, redis.plain, [q], 30_000);
    s.peakRssMb = rss.stop();
    s.health = health.summary(from);
    s.check("gRPC health stays SERVING (Redis answers; it is full, not down)", health.seen.length === 1, s.health);
    health.stop();
    s.check("everything settles", settled);
    s.check("the server process did not crash", server.alive());

    const delivered = workers.flatMap((w) => w.events.filter((e) => e.e === "d").map((e) => e.p!.slice(0, 11)));
    const leaked = delivered.filter((p) => refused.has(p));
    s.check("no item of a refused call was ever delivered (no partial batch)", leaked.length === 0, leaked.slice(0, 5));
    const f = check(ledger, [await readQueue(redis.plain, q)]);
    s.figuresFrom(f);
    s.stranded = f.inProcessing;
    s.check("0 lost", f.lost === 0, f.lostIds);
    s.check("0 stranded in processing", f.inProcessing === 0, { inProcessing: f.inProcessing });
    s.check("no unacknowledged item delivered", f.unknownDelivered === 0, { unknownDelivered: f.unknownDelivered });
    s.note(
      `${f.enqueued} acknowledged, ${refusals.length} calls (${refused.size} items) refused, none of them written; ` +
        `${leasedWhileFull} leased in 3 s while Redis was full (lease.lua's LMOVE is refused over maxmemory); ${delivered.length} deliveries in all`,
    );
  }));
