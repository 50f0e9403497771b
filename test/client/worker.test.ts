/** The worker helper and settling from any instance. */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker, SettleError, type HandlerContext } from "../../src/client/worker.js";
import { ManualClock } from "../../src/clock.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startProxy } from "../helpers/proxy.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let a: TestSwitchyard;
let b: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  a = await startSwitchyard(redis);
  b = await startSwitchyard(redis);
});
afterAll(async () => {
  await Promise.all([a.stop(), b.stop()]);
  await redis.stop();
});

describe("runWorker", () => {
  it("acks what the handler finishes and retries what it throws on", async () => {
    const Q = "{work}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const ids = await a.client.enqueue(Q, Array.from({ length: 20 }, (_, i) => `job-${i}`));
    const seen = new Map<string, number>();
    const lastErrors = new Map<string, string>();
    const worker = runWorker({
      client: a.client,
      queue: Q,
      concurrency: 5,
      handler: (d, ctx) => {
        seen.set(d.id, ctx.attempt);
        lastErrors.set(d.id, ctx.lastError);
        if (Buffer.from(d.payload).toString() === "job-7" && d.deliveryCount === 1) throw new Error("flaky");
      },
    });
    await expect.poll(() => worker.processed, { timeout: 10_000 }).toBe(21);
    await worker.stop();
    expect([...seen.keys()].sort()).toEqual([...ids].sort());
    expect(seen.get(ids[7])).toBe(2);
    // The thrown error's message went with the retry and came back on the next delivery.
    expect([lastErrors.get(ids[7]), lastErrors.get(ids[6])]).toEqual(["flaky", ""]);
    expect(await redis.plain.llen(Q)).toBe(0);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });

  it("sends the handler's reply with the ack", async () => {
    await a.client.createQueue({ name: "{in}", mode: QueueMode.RELIABLE });
    await a.client.createQueue({ name: "{out}", mode: QueueMode.RELIABLE });
    await a.client.enqueue("{in}", ["cat.png"]);
    const worker = runWorker({
      client: a.client,
      queue: "{in}",
      concurrency: 1,
      handler: (d) => ({ reply: { queue: "{out}", items: [`thumb:${Buffer.from(d.payload).toString()}`] } }),
    });
    await expect.poll(() => redis.plain.llen("{out}")).toBe(1);
    await worker.stop();
    const out = b.client.lease("{out}", 1);
    const [reply] = await out.take(1);
    expect(Buffer.from(reply.payload).toString()).toBe("thumb:cat.png");
    await out.close();
  });
});

describe("long handlers (issue 14)", () => {
  const MIN_IDLE_MS = 10_000;
  const declareLong = (q: string) =>
    a.client.createQueue({ name: q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${q}.claims` });

  it("a handler running 3 × min_idle keeps its lease: the watchdog never hands the item out again", async () => {
    const Q = "{long}";
    const clock = a.clock as ManualClock;
    await declareLong(Q);
    await a.client.enqueue(Q, ["render"]);
    const contexts: HandlerContext[] = [];
    let finish!: () => void;
    const finished = new Promise<void>((ok) => (finish = ok));
    // Concurrency 2: a redelivery of the item would reach this same worker.
    const worker = runWorker({ client: a.client, queue: Q, concurrency: 2, clock, handler: (_d, ctx) => (contexts.push(ctx), finished) });
    await expect.poll(() => contexts.length).toBe(1);
    // The watchdog runs every second of the manual clock; the worker's extensions every third of
    // min_idle, and advance() waits for each one's answer before it fires a later timer.
    for (let s = 0; s < (3 * MIN_IDLE_MS) / 1000; s++) await clock.advance(1000);
    expect(contexts.map((c) => [c.attempt, c.lastError, c.signal.aborted])).toEqual([[1, "", false]]);
    expect([await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([0, 1]);
    const expires = await contexts[0].extend();
    expect(expires.getTime()).toBe(clock.now() + MIN_IDLE_MS);
    finish();
    await expect.poll(() => worker.processed).toBe(1);
    await worker.stop();
    expect([await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`), await redis.plain.llen(`${Q}.dead`)]).toEqual([0, 0, 0]);
    expect(contexts).toHaveLength(1);
    expect((await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
  });

  it("a handler's context copies, spreads and comes apart like a plain object: signal and extend work on their own", async () => {
    const Q = "{taken-apart}";
    const clock = a.clock as ManualClock;
    await declareLong(Q);
    await a.client.enqueue(Q, ["render"]);
    let ctx: HandlerContext | undefined;
    let finish!: () => void;
    const finished = new Promise<void>((ok) => (finish = ok));
    const worker = runWorker({ client: a.client, queue: Q, concurrency: 1, clock, handler: (_d, c) => ((ctx = c), finished) });
    await expect.poll(() => ctx).toBeDefined();
    const c = ctx!;
    // Own enumerable fields, as an object literal's: a spread or Object.assign keeps the signal.
    expect(Object.keys(c).sort()).toEqual(["attempt", "deliveryCount", "extend", "lastError", "signal"]);
    const copy = { ...c };
    expect(copy.signal).toBeInstanceOf(AbortSignal);
    expect(copy.signal).toBe(c.signal);
    expect(new Proxy(c, {}).signal).toBe(c.signal);
    expect(JSON.parse(JSON.stringify(c))).toEqual({ attempt: 1, deliveryCount: 1, lastError: "", signal: {} });
    const { attempt, signal, extend } = c;
    expect([attempt, signal.aborted]).toEqual([1, false]);
    await clock.advance(1000);
    const expires = await extend();
    expect(expires.getTime()).toBe(clock.now() + MIN_IDLE_MS);
    finish();
    await expect.poll(() => worker.processed).toBe(1);
    await worker.stop();
    expect((await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
  });

  it("a running handler keeps its lease when UpdateQueue lowers min_idle; a delivery nobody extends is still recovered", async () => {
    const clock = a.clock as ManualClock;
    const [Q, IDLE] = ["{lowered}", "{lowered-idle}"];
    for (const q of [Q, IDLE]) {
      await a.client.createQueue({ name: q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(60_000), recoverySet: `${q}.claims`, maxDeliveries: 1 });
      await a.client.enqueue(q, ["render"]);
    }
    const contexts: HandlerContext[] = [];
    let finish!: () => void;
    const finished = new Promise<void>((ok) => (finish = ok));
    const worker = runWorker({ client: a.client, queue: Q, concurrency: 2, clock, handler: (_d, ctx) => (contexts.push(ctx), finished) });
    // A worker that never extends: told 60 s, its item may stay 60 s.
    const idle = a.client.lease(IDLE, 1);
    await idle.take(1);
    await expect.poll(() => contexts.length).toBe(1);
    // The worker was told 60 s and extends every 20 s; the queue now recovers after 3 s.
    for (const q of [Q, IDLE]) await b.client.updateQueue({ name: q, minIdle: durationFromMs(3000) }, ["min_idle"]);
    await expect.poll(() => a.app.queues.registry.cached(Q)?.minIdleMs).toBe(3000);
    await expect.poll(() => a.app.queues.registry.cached(IDLE)?.minIdleMs).toBe(3000);
    for (let s = 0; s < 30; s++) await clock.advance(1000);
    expect(contexts).toHaveLength(1);
    const stats = async (q: string) => (({ ready, processing, deadLetter }) => [ready, processing, deadLetter])(await a.client.getQueueStats(q));
    expect([await stats(Q), await stats(IDLE)]).toEqual([[0n, 1n, 0n], [0n, 1n, 0n]]);
    // 60 s after its delivery, nobody extended the idle one: recovered (dead-lettered: max_deliveries 1).
    for (let s = 0; s < 35; s++) await clock.advance(1000);
    expect(await stats(IDLE)).toEqual([0n, 0n, 1n]);
    expect(await stats(Q)).toEqual([0n, 1n, 0n]);
    finish();
    await expect.poll(() => worker.processed).toBe(1);
    await worker.stop();
    await idle.close();
    expect(contexts).toHaveLength(1);
    expect((await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
  });

  it("the item of a worker killed mid-handler (SIGKILL) is delivered again", async () => {
    const Q = "{long-killed}";
    const clock = a.clock as ManualClock;
    await declareLong(Q);
    const [id] = await a.client.enqueue(Q, ["render"]);
    // A worker process whose handler never finishes; it prints the id it holds.
    const client = fileURLToPath(new URL("../../dist/client/index.js", import.meta.url));
    const child = spawn(process.execPath, [
      "--input-type=module",
      "-e",
      `import { runWorker } from ${JSON.stringify(client)};
       runWorker({ client: ${JSON.stringify(a.address)}, queue: ${JSON.stringify(Q)}, concurrency: 1,
         handler: (d) => (process.stdout.write(d.id + "\\n"), new Promise(() => undefined)) });`,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    const exited = new Promise((ok) => child.on("exit", ok));
    try {
      await expect.poll(() => out, { timeout: 10_000 }).toBe(`${id}\n`);
    } finally {
      child.kill("SIGKILL");
    }
    await exited;
    const again: [string, number][] = [];
    const worker = runWorker({ client: a.client, queue: Q, concurrency: 1, clock, handler: (d) => void again.push([d.id, d.deliveryCount]) });
    // Its stream's end returns the item at once; failing that, the watchdog would after min_idle.
    await expect.poll(async () => (again.length > 0 ? again : (await clock.advance(1000), again)), { timeout: 10_000 }).toEqual([[id, 2]]);
    await worker.stop();
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });

  it("fires the handler's signal when the instance drains the stream", async () => {
    const c = await startSwitchyard(redis);
    const Q = "{long-drain}";
    await declareLong(Q);
    await a.client.enqueue(Q, ["render"]);
    let aborted: unknown;
    let got = 0;
    const worker = runWorker({
      client: c.client,
      queue: Q,
      concurrency: 1,
      clock: c.clock,
      handler: (_d, ctx) => {
        got++;
        return new Promise<void>((ok) => ctx.signal.addEventListener("abort", () => ((aborted = ctx.signal.reason), ok())));
      },
    });
    await expect.poll(() => got).toBe(1);
    await c.app.stop();
    expect(String(aborted)).toContain("draining");
    await worker.stop();
    c.client.close();
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });
  /**
   * A worker on a new queue of one item whose first delivery's handler (`first`) is still running when
   * the watchdog takes the item back: the worker's clock stands still while the server's passes min_idle,
   * so its next automatic extend, made once this returns, is refused. Later deliveries return at once.
   */
  async function supersededWorker(Q: string, first: (ctx: HandlerContext) => Promise<void>) {
    const serverClock = a.clock as ManualClock;
    const workerClock = new ManualClock(serverClock.now());
    await declareLong(Q);
    await a.client.enqueue(Q, ["render"]);
    const contexts: HandlerContext[] = [];
    const errors: unknown[] = [];
    const worker = runWorker({
      client: a.client,
      queue: Q,
      concurrency: 1,
      clock: workerClock,
      onError: (err) => errors.push(err),
      handler: (_d, ctx) => {
        contexts.push(ctx);
        return ctx.attempt === 1 ? first(ctx) : undefined;
      },
    });
    await expect.poll(() => contexts.length).toBe(1);
    for (let s = 0; s <= MIN_IDLE_MS / 1000; s++) await serverClock.advance(1000);
    await workerClock.advance(MIN_IDLE_MS / 3);
    return { contexts, errors, worker };
  }

  it("fires the handler's signal when an extend is refused as superseded, and acks nothing for it", async () => {
    const Q = "{long-superseded}";
    // The first delivery works on until told to stop, then reports success: that must not be acked.
    const { contexts, errors, worker } = await supersededWorker(Q, (ctx) => new Promise<void>((ok) => ctx.signal.addEventListener("abort", () => ok())));
    await expect.poll(() => contexts[0].signal.aborted).toBe(true);
    const reason = contexts[0].signal.reason as unknown;
    expect(reason).toBeInstanceOf(SettleError);
    expect((reason as SettleError).result.reason).toBe("LEASE_SUPERSEDED");
    await expect(contexts[0].extend()).rejects.toMatchObject({ result: { reason: "LEASE_SUPERSEDED" } });
    // The item is delivered again (to this worker) and acked once; the first delivery counts for nothing.
    await expect.poll(() => contexts.map((c) => c.attempt)).toEqual([1, 2]);
    await expect.poll(() => worker.processed).toBe(1);
    await worker.stop();
    expect(worker.processed).toBe(1);
    expect(errors).toContainEqual(reason);
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n, deadLetter: 0n, completedTotal: 1n });
  });

  it("a handler that asks for its signal only after its lease was lost finds it fired, with the refusal", async () => {
    let finish!: () => void;
    // The first delivery never looks at its signal while it runs.
    const { contexts, errors, worker } = await supersededWorker("{late-signal}", () => new Promise<void>((ok) => (finish = ok)));
    await expect.poll(() => errors.length).toBe(1);
    const signal = contexts[0].signal;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe(errors[0]);
    expect((signal.reason as SettleError).result.reason).toBe("LEASE_SUPERSEDED");
    finish();
    await expect.poll(() => worker.processed).toBe(1);
    await worker.stop();
    expect(await a.client.getQueueStats("{late-signal}")).toMatchObject({ ready: 0n, processing: 0n, completedTotal: 1n });
  });

  it("stop() fires every running handler's signal, waits up to stopGraceMs, then closes: what did not finish goes back", async () => {
    const Q = "{stop-grace}";
    const clock = new ManualClock();
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const [polite, stubborn] = await a.client.enqueue(Q, ["polite", "stubborn"]);
    const signals = new Map<string, AbortSignal>();
    const worker = runWorker({
      client: a.client,
      queue: Q,
      concurrency: 2,
      clock,
      stopGraceMs: 5000,
      handler: (d, ctx) => {
        signals.set(d.id, ctx.signal);
        // One finishes when told to; the other never does.
        return new Promise<void>((ok) => d.id === polite && ctx.signal.addEventListener("abort", () => ok()));
      },
    });
    await expect.poll(() => signals.size).toBe(2);
    let stoppedWith: string[] | undefined;
    const stopped = worker.stop().then((left) => (stoppedWith = left.map((d) => d.id)));
    expect([signals.get(polite)?.aborted, signals.get(stubborn)?.aborted]).toEqual([true, true]);
    expect(String(signals.get(stubborn)?.reason)).toContain("stopping");
    // The polite handler's ack goes out; stop() waits for the other until the grace passes on the worker's clock.
    await expect.poll(async () => (await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
    expect(stoppedWith).toBeUndefined();
    await clock.advance(4999);
    expect(stoppedWith).toBeUndefined();
    await clock.advance(1);
    await stopped;
    expect(stoppedWith).toEqual([stubborn]);
    expect(worker.processed).toBe(1);
    // The closed stream's unsettled item went back to the queue.
    await expect.poll(async () => (await a.client.getQueueStats(Q)).ready).toBe(1n);
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 1n, processing: 0n, completedTotal: 1n });
  });
});

describe("a worker whose stream is lost", () => {
  it("aborts its handlers' signal, and gets the item again on the stream it reopens", async () => {
    const Q = "{long-lost}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const [id] = await a.client.enqueue(Q, ["render"]);
    const proxy = await startProxy(a.address);
    const client = new SwitchyardClient(proxy.address);
    const seen: [number, string][] = [];
    let reason: unknown;
    const worker = runWorker({
      client,
      queue: Q,
      concurrency: 1,
      handler: (d, ctx) => {
        seen.push([ctx.attempt, d.id]);
        if (ctx.attempt > 1) return;
        return new Promise<void>((_ok, fail) => ctx.signal.addEventListener("abort", () => ((reason = ctx.signal.reason), fail(ctx.signal.reason))));
      },
    });
    try {
      await expect.poll(() => seen.length).toBe(1);
      expect(proxy.cut()).toBeGreaterThan(0);
      await expect.poll(() => String(reason)).toContain("the lease stream ended");
      // The server returned the item when the stream ended; the worker's new stream gets it.
      await expect.poll(() => seen, { timeout: 10_000 }).toEqual([[1, id], [2, id]]);
      // Only the second delivery was settled: the first one's retry had no stream to go on.
      await expect.poll(async () => (await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
      expect(worker.processed).toBe(1);
    } finally {
      await worker.stop();
      client.close();
      await proxy.close();
    }
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n });
  });

  it("opens the new stream with credit for the handlers still running from the old one, and raises it as they finish", async () => {
    const Q = "{lost-credit}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await a.client.enqueue(Q, ["render"]);
    const proxy = await startProxy(a.address);
    const client = new SwitchyardClient(proxy.address);
    const finish: (() => void)[] = [];
    // The server's credit for this queue's streams (a lost stream's ends with it).
    const credits = () => [...(a.app.queues["streams"] as Set<LeaseStream>)].filter((s) => s.queue === Q && !s.closed).map((s) => s.credit);
    const worker = runWorker({
      client,
      queue: Q,
      concurrency: 2,
      // Every delivery ignores its signal and runs until the test lets it finish.
      handler: () => new Promise<void>((ok) => finish.push(ok)),
    });
    try {
      await expect.poll(() => finish.length).toBe(1);
      // No handler has finished: nothing says they are quick, so nothing is prefetched (prefetchMs).
      expect(credits()).toEqual([2]);
      expect(proxy.cut()).toBeGreaterThan(0);
      // The item came back and the new stream got it again, while the first handler still runs: 2 of 2.
      await expect.poll(() => finish.length, { timeout: 10_000 }).toBe(2);
      expect(credits()).toEqual([1]);
      finish[0]();
      await expect.poll(credits).toEqual([2]);
      finish[1]();
      await expect.poll(async () => (await a.client.getQueueStats(Q)).completedTotal).toBe(1n);
    } finally {
      for (const ok of finish) ok();
      await worker.stop();
      client.close();
      await proxy.close();
    }
    expect(await a.client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n });
  });
});

describe("settling on another instance", () => {
  it("acks on instance B an item leased through instance A, and frees nothing B does not hold", async () => {
    const Q = "{cross}";
    await a.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await b.client.enqueue(Q, ["x"]);
    const lease = a.client.lease(Q, 1);
    const [d] = await lease.take(1);
    await b.client.ack(d.leaseToken);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await expect(a.client.ack(d.leaseToken)).rejects.toMatchObject({ code: 9 });
    await lease.close();
  });
});
