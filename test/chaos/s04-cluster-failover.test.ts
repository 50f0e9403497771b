/**
 * Scenario 4: Redis Cluster (6 nodes: 3 masters, 3 replicas, from
 * test/helpers/cluster.ts), two Switchyard servers, producers and workers.
 *  - manual failover (CLUSTER FAILOVER on the replica of the queue's master):
 *    0 lost, 0 duplicates;
 *  - forced failover (SIGKILL of the queue's master): service resumes within
 *    5 s of the replica's promotion; lost/duplicate counts are reported for
 *    plain enqueues (acknowledged by the master, maybe not yet replicated), and
 *    an enqueue that waits for a replica (WAIT) must lose nothing.
 */
import { afterAll, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { Redis } from "ioredis";
import { create } from "@bufbuild/protobuf";
import { SwitchyardClient } from "../../src/client/client.js";
import { EnqueueRequestSchema, type EnqueueResponse } from "../../src/gen/switchyard/v1/queue_pb.js";
import { slotOf } from "../../src/redis/keys.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { check, produce, readQueue, waitSettled, Scenario } from "./harness/ledger.js";
import { killStarted, sleep, startServer, startWorker, until } from "./harness/procs.js";
import { declareReliable } from "./harness/grpc.js";

const cleanup: (() => unknown)[] = [];
afterAll(async () => {
  killStarted();
  for (const fn of cleanup.reverse()) await fn();
});

/** Runs `fn` on a connection of its own to one node ("host:port"). */
async function onNode<T>(address: string, fn: (r: Redis) => Promise<T>): Promise<T> {
  const [host, port] = address.split(":");
  const r = new Redis({ host, port: Number(port), lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 });
  r.on("error", () => undefined);
  try {
    await r.connect();
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/** Slot ranges with their master and replica addresses, as the first node that answers sees them. */
async function slotOwners(cluster: TestCluster): Promise<{ from: number; to: number; master: string; replicas: string[] }[]> {
  for (const node of cluster.nodes) {
    try {
      const slots = await onNode(`${node.host}:${node.port}`, (r) => r.cluster("SLOTS"));
      return slots.map(([from, to, master, ...replicas]) => ({ from, to, master: `${master[0]}:${master[1]}`, replicas: replicas.map((x) => `${x[0]}:${x[1]}`) }));
    } catch {
      // that node is down: ask the next
    }
  }
  throw new Error("no cluster node answers CLUSTER SLOTS");
}

async function ownerOf(cluster: TestCluster, key: string) {
  const slot = slotOf(key);
  return (await slotOwners(cluster)).find((r) => r.from <= slot && slot <= r.to)!;
}

/** The enqueue option that waits for a replica, if the API has one (a field of EnqueueRequest). */
const waitField = EnqueueRequestSchema.fields.find((f) => /replica|wait/i.test(f.name));

it("Redis Cluster: manual failover loses and duplicates nothing; a killed master's replica takes over and service resumes within 5 s", async () => {
  const s = new Scenario("04", "Redis Cluster: manual and forced failover");
  await s.run(async () => {
    const { ledger } = s;
    const cluster = await startCluster();
    cleanup.push(() => cluster.stop());
    const clusterNodes = cluster.seeds.map((x) => `${x.host}:${x.port}`).join(",");
    const env = { SWITCHYARD_WATCHDOG_INTERVAL: "250ms" };
    const [a, b] = await Promise.all([startServer("s04-A", { clusterNodes }, { env }), startServer("s04-B", { clusterNodes }, { env })]);
    const toA = new SwitchyardClient(a.address, { timeoutMs: 3000 });
    const toB = new SwitchyardClient(b.address, { timeoutMs: 3000 });
    cleanup.push(() => (toA.close(), toB.close()));
    // Replicas show in CLUSTER SLOTS once they have attached to their masters.
    const replicated = await until(async () => (await slotOwners(cluster)).every((o) => o.replicas.length > 0), 15_000, 100);
    s.check("every master has a replica", replicated, await slotOwners(cluster));
    const system = await ownerOf(cluster, "{switchyard}:queues");

    // --- Manual failover of the master that holds queue {s04m}.
    const qm = "{s04m}";
    await declareReliable(toA, qm, { minIdleMs: 3000 });
    const before = await ownerOf(cluster, qm);
    const producer = produce(ledger, toA, qm, { batch: 5, everyMs: 25 });
    const workers = [1, 2].map((n) => startWorker(ledger, { name: `s04-m-w${n}`, addresses: [a.address, b.address], queue: qm, credit: 5, delay: 10 }));
    await until(() => ledger.ackedIds().size >= 100, 15_000);
    ledger.note("CLUSTER FAILOVER", { replica: before.replicas[0] });
    const failoverAt = Date.now();
    await onNode(before.replicas[0], (r) => r.cluster("FAILOVER"));
    const switched = await until(async () => (await ownerOf(cluster, qm)).master === before.replicas[0], 15_000, 100);
    s.check("manual failover: the replica becomes the queue's master", switched);
    await sleep(2000);
    await producer.stop();
    const settledM = await waitSettled(ledger, cluster.plain, [qm], 20_000);
    s.check("manual failover: everything settles", settledM);
    workers.forEach((w) => w.kill("SIGKILL"));
    const fm = check(ledger, [await readQueue(cluster.plain, qm)]);
    s.figures.manual = fm;
    s.check("manual failover: 0 lost", fm.lost === 0, fm.lostIds);
    s.check("manual failover: 0 duplicates", fm.duplicates === 0, { duplicates: fm.duplicates });
    const failed = producer.failures.filter((f) => f.t >= failoverAt);
    s.note(`manual: ${fm.enqueued} items, ${failed.length} enqueues refused during the switch`);

    // --- Forced failover: SIGKILL a master (not the one with Switchyard's own keys).
    const owners = await slotOwners(cluster);
    const target = owners.find((o) => o.master !== system.master)!;
    const tagOn = (prefix: string) => {
      for (let i = 0; i < 10_000; i++) {
        const slot = slotOf(`{${prefix}-${i}}`);
        if (target.from <= slot && slot <= target.to) return `{${prefix}-${i}}`;
      }
      throw new Error("no tag found");
    };
    const qf = tagOn("s04f");
    const qw = tagOn("s04w");
    await declareReliable(toA, qf, { minIdleMs: 3000 });
    await declareReliable(toA, qw, { minIdleMs: 3000 });
    const waitingCall = (queue: string) =>
      waitField
        ? (payloads: string[]) =>
            new Promise<string[]>((ok, fail) => {
              const value = waitField.fieldKind === "scalar" && waitField.scalar === 8 /* BOOL */ ? true : 1;
              const req = create(EnqueueRequestSchema, { queue, items: payloads.map((p) => ({ payload: Buffer.from(p) })), [waitField.localName]: value } as never);
              (toA.grpc as unknown as { enqueue: (...x: unknown[]) => void }).enqueue(req, new grpc.Metadata(), { deadline: Date.now() + 3000 }, (err: Error | null, res: EnqueueResponse) =>
                err ? fail(err) : ok(res.ids),
              );
            })
        : undefined;
    const pf = produce(ledger, toA, qf, { batch: 5, everyMs: 25 });
    const pw = produce(ledger, toA, qw, { batch: 5, everyMs: 25, call: waitingCall(qw) });
    const fw = [1, 2].flatMap((n) => [
      startWorker(ledger, { name: `s04-f-w${n}`, addresses: [a.address, b.address], queue: qf, credit: 5, delay: 10 }),
      startWorker(ledger, { name: `s04-w-w${n}`, addresses: [b.address, a.address], queue: qw, credit: 5, delay: 10 }),
    ]);
    await until(() => ledger.settles.filter((x) => x.worker.startsWith("s04-f") || x.worker.startsWith("s04-w")).length >= 100, 15_000);
    const victim = cluster.nodes.find((n) => `${n.host}:${n.port}` === target.master)!;
    ledger.note("SIGKILL master", { master: target.master });
    const killedAt = Date.now();
    await victim.server.kill();
    const promoted = await until(async () => target.replicas.includes((await ownerOf(cluster, qf)).master), 20_000, 100);
    const promotedAt = Date.now();
    s.check("forced failover: the replica is promoted", promoted, { ms: promotedAt - killedAt });
    // Plain enqueues measure the resumption. Enqueues that wait for a replica cannot resume on the
    // promoted master until it has a replica again (its only one was the killed master): they are
    // refused with UNAVAILABLE meanwhile, and what they did confirm must not be lost.
    const resumed = await until(() => pf.lastOkAt() > promotedAt, 10_000, 20);
    const resumedAt = pf.lastOkAt();
    s.recoveryMs = resumed ? resumedAt - promotedAt : undefined;
    s.check("forced failover: service resumes within 5 s of the promotion", resumed && resumedAt - promotedAt < 5000, {
      afterPromotionMs: resumedAt - promotedAt,
      afterKillMs: resumedAt - killedAt,
    });
    await sleep(1500);
    await Promise.all([pf.stop(), pw.stop()]);
    const settledF = await waitSettled(ledger, cluster.plain, [qf, qw], 25_000);
    s.check("forced failover: everything settles", settledF);
    fw.forEach((w) => w.kill("SIGKILL"));
    const ff = check(ledger, [await readQueue(cluster.plain, qf)]);
    const fwait = check(ledger, [await readQueue(cluster.plain, qw)]);
    s.figures.forced = ff;
    s.figures.forcedWait = fwait;
    s.check("forced failover: a and b kept serving", a.alive() && b.alive());
    s.check("forced failover: no item in two places", ff.misplaced.length === 0 && fwait.misplaced.length === 0);
    s.check(
      `an enqueue option that waits for a replica (WAIT) exists${waitField ? ` (${waitField.name})` : ""}`,
      waitField !== undefined,
      waitField ? undefined : "EnqueueRequest has no field that waits for replication",
    );
    if (waitField) s.check("forced failover with WAIT: 0 lost", fwait.lost === 0, fwait.lostIds);
    s.lost = fm.lost + ff.lost + fwait.lost;
    s.duplicates = fm.duplicates + ff.duplicates + fwait.duplicates;
    s.note(
      `forced: promotion ${promotedAt - killedAt} ms after SIGKILL; plain enqueues lost ${ff.lost}/${ff.enqueued}, dup ${ff.duplicates}; ` +
        (waitField ? `WAIT enqueues lost ${fwait.lost}/${fwait.enqueued}, dup ${fwait.duplicates}` : `no WAIT option: second queue (plain) lost ${fwait.lost}/${fwait.enqueued}, dup ${fwait.duplicates}`),
    );
  });
});
