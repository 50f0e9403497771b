/**
 * One process of the deployed-shape benchmark (deployed.ts): a producer or a
 * worker of one system, as users run them, driven by the parent over IPC.
 *
 *   node dist-bench/agent.js switchyard|bullmq|relay|echo      (forked by agents.ts)
 *
 * A process only ever loads its own system's client. Requests are
 * `{ id, op, args }`; each gets `{ id, ok }` or `{ id, error }`. While a worker
 * consumes it also sends `{ progress }` every few milliseconds when its count
 * changed, so the parent can see the last item handled without a message per
 * item. Times are monoUs() (CLOCK_MONOTONIC), comparable across processes.
 */
import type { AgentRequest, AgentReply, ConsumeArgs, Consumed, PacedArgs, ProduceArgs, Progress, EchoArgs } from "./agents.js";
import { deferred, jsonItem, monoUs, pool, sleep, type JsonItem } from "./lib.js";

const system = process.argv[2];
const send = (msg: AgentReply | { progress: Progress }) => process.send!(msg);

/** What a system does in this process. */
interface Role {
  connect(args: Record<string, string>): Promise<void>;
  /** Gets a worker ready to consume `queue` (connections open), without taking anything yet. */
  prepare(args: ConsumeArgs): Promise<void>;
  /** Starts the prepared worker. */
  go(): void;
  /** Stops the worker (running handlers finish, settles sent). */
  stop(): Promise<void>;
  /** Enqueues `items` in calls of `perCall`, `inFlight` at once; resolves to the ms it took. */
  produce(args: ProduceArgs): Promise<number>;
  /** Enqueues `count` single items at `rate`/s, open loop (0: serially), each stamped with its send time. */
  paced(args: PacedArgs): Promise<void>;
  close(): Promise<void>;
}

/** The consuming side's counters, shared by both systems. */
class Tally {
  handled = 0;
  lastAt = 0;
  /** Enqueue→handler latency (µs) by sequence number, when measured. */
  latencies?: Float64Array;
  private reported = 0;
  private timer?: NodeJS.Timeout;

  reset(args: ConsumeArgs): void {
    this.handled = 0;
    this.lastAt = 0;
    this.reported = 0;
    this.latencies = args.latencyItems ? new Float64Array(args.latencyItems).fill(NaN) : undefined;
  }

  /** Records `item`'s enqueue→handler latency, when measured; call as the handler starts. */
  started(item: JsonItem): void {
    if (this.latencies && item.seq < this.latencies.length) this.latencies[item.seq] = monoUs() - item.t;
  }

  /** Counts an item done now. */
  count(): void {
    this.handled++;
    this.lastAt = monoUs();
  }

  startReporting(everyMs: number): void {
    this.timer = setInterval(() => this.report(), everyMs);
  }

  report(): void {
    if (this.handled === this.reported) return;
    this.reported = this.handled;
    send({ progress: { handled: this.handled, lastAt: this.lastAt } });
  }

  finish(): Consumed {
    clearInterval(this.timer);
    this.report();
    return { handled: this.handled, lastAt: this.lastAt, latencies: this.latencies ? [...this.latencies] : undefined };
  }
}

const tally = new Tally();

async function switchyardRole(): Promise<Role> {
  const { SwitchyardClient } = await import("../dist/client/client.js");
  const { runWorker } = await import("../dist/client/worker.js");
  let client!: InstanceType<typeof SwitchyardClient>;
  let prepared: ConsumeArgs | undefined;
  let worker: ReturnType<typeof runWorker> | undefined;
  const decoder = new TextDecoder();
  return {
    async connect(args) {
      client = new SwitchyardClient(args.address, { coalesceEnqueues: args.coalesce !== "off" });
      await new Promise<void>((ok, fail) => client.grpc.waitForReady(Date.now() + 10_000, (err) => (err ? fail(err) : ok())));
    },
    async prepare(args) {
      prepared = args;
      tally.reset(args);
    },
    go() {
      const args = prepared!;
      worker = runWorker({
        client,
        queue: args.queue,
        group: args.group,
        concurrency: args.concurrency,
        // Counted as the handler runs: its ack goes out after, and the parent waits for it in Redis (reliable).
        handler: (d) => {
          tally.started(JSON.parse(decoder.decode(d.payload)) as JsonItem);
          tally.count();
        },
        onError: (err) => process.stderr.write(`switchyard worker: ${String(err)}\n`),
      });
      tally.startReporting(args.progressMs);
    },
    async stop() {
      await worker?.stop();
      worker = undefined;
    },
    async produce(args) {
      const text = JSON.stringify(jsonItem(0));
      const batch = Array.from({ length: args.perCall }, () => text);
      const t0 = monoUs();
      await pool(args.items / args.perCall, args.inFlight, () => client.enqueue(args.queue, batch));
      return (monoUs() - t0) / 1000;
    },
    async paced(args) {
      await paced(args, (i) => client.enqueue(args.queue, [JSON.stringify(jsonItem(i, monoUs()))]));
    },
    async close() {
      client.close();
    },
  };
}

async function bullmqRole(): Promise<Role> {
  const { Queue, Worker } = await import("bullmq");
  const opts = { removeOnComplete: true, removeOnFail: true };
  let connection!: { path: string; maxRetriesPerRequest: null };
  let worker: InstanceType<typeof Worker<JsonItem>> | undefined;
  /** A producer's Queue, connected before the timing starts and closed after. */
  const withQueue = async <T>(name: string, use: (q: InstanceType<typeof Queue<JsonItem>>) => Promise<T>): Promise<T> => {
    const q = new Queue<JsonItem>(name, { connection });
    try {
      await q.waitUntilReady();
      return await use(q);
    } finally {
      await q.close();
    }
  };
  let reportEvery = 5;
  let raw: Awaited<ReturnType<typeof rawStreamWorker>> | undefined;
  return {
    async connect(args) {
      connection = { path: args.redisPath, maxRetriesPerRequest: null };
    },
    async prepare(args) {
      tally.reset(args);
      reportEvery = args.progressMs;
      if (args.rawStream) {
        raw = await rawStreamWorker(connection.path, args);
        return;
      }
      // Counted when BullMQ reports the job completed: after its move-to-completed script returned.
      const processor = async (job: { data: JsonItem }) => tally.started(job.data);
      const w = new Worker<JsonItem>(args.queue, processor, { connection, concurrency: args.concurrency, autorun: false });
      w.on("completed", () => tally.count());
      w.on("failed", (_job, err) => process.stderr.write(`bullmq worker: ${String(err)}\n`));
      w.on("error", (err) => process.stderr.write(`bullmq worker: ${String(err)}\n`));
      await w.waitUntilReady();
      worker = w;
    },
    go() {
      if (raw) raw.go();
      else void worker!.run();
      tally.startReporting(reportEvery);
    },
    async stop() {
      await raw?.stop();
      raw = undefined;
      await worker?.close();
      worker = undefined;
    },
    async produce(args) {
      if (args.raw) return rawPush(connection.path, args);
      return withQueue(args.queue, async (q) => {
        const data = jsonItem(0);
        const jobs = Array.from({ length: args.perCall }, () => ({ name: "j", data, opts }));
        const t0 = monoUs();
        await pool(args.items / args.perCall, args.inFlight, () => (args.perCall === 1 ? q.add("j", data, opts) : q.addBulk(jobs)));
        return (monoUs() - t0) / 1000;
      });
    },
    paced(args) {
      return withQueue(args.queue, (q) => paced(args, (i) => q.add("j", jsonItem(i, monoUs()), opts)));
    },
    async close() {},
  };
}

/**
 * Stream `args.queue` consumed in group `args.group` with plain ioredis: XREADGROUP of up to
 * `concurrency` entries (blocking), each handled, then one XACK of them all. Redis alone, no framework.
 */
async function rawStreamWorker(path: string, args: ConsumeArgs): Promise<{ go(): void; stop(): Promise<void> }> {
  const { Redis } = await import("ioredis");
  const redis = new Redis({ path });
  await redis.ping();
  let stopping = false;
  let loop: Promise<void> | undefined;
  const decoder = new TextDecoder();
  const run = async () => {
    while (!stopping) {
      const read = (await redis.callBuffer("XREADGROUP", "GROUP", args.group!, "raw", "COUNT", args.concurrency, "BLOCK", 100, "STREAMS", args.queue, ">")) as
        | [Buffer, [Buffer, Buffer[]][]][]
        | null;
      const entries = read?.[0]?.[1] ?? [];
      if (entries.length === 0) continue;
      for (const [, fields] of entries) {
        tally.started(JSON.parse(decoder.decode(fields[1])) as JsonItem);
        tally.count();
      }
      await redis.xack(args.queue, args.group!, ...entries.map(([id]) => id));
    }
  };
  return {
    go() {
      loop = run();
    },
    async stop() {
      stopping = true;
      await loop;
      redis.disconnect();
    },
  };
}

/** The same in LPUSHes of `perCall` JSON values from a plain ioredis client: Redis alone, no framework. */
async function rawPush(path: string, args: ProduceArgs): Promise<number> {
  const { Redis } = await import("ioredis");
  const redis = new Redis({ path });
  try {
    await redis.ping();
    const values = Array.from({ length: args.perCall }, () => JSON.stringify(jsonItem(0)));
    const t0 = monoUs();
    await pool(args.items / args.perCall, args.inFlight, () => redis.lpush(args.queue, ...values));
    return (monoUs() - t0) / 1000;
  } finally {
    redis.disconnect();
  }
}

/**
 * Sends `count` items at `rate`/s, open loop: a late timer sends what it owes at once; rate 0: one after the other,
 * each awaited. Like a producer that fires and forgets, it keeps no answer (an id list, a BullMQ Job) once it has
 * come: only how many are still out, and the first failure.
 */
async function paced(args: PacedArgs, sendOne: (i: number) => Promise<unknown>): Promise<void> {
  if (args.rate === 0) {
    for (let i = 0; i < args.count; i++) await sendOne(i);
    return;
  }
  const gap = 1000 / args.rate;
  const t0 = performance.now();
  const allAnswered = deferred();
  let out = 0;
  let sending = true;
  let failure: { err: unknown } | undefined;
  const answered = () => {
    if (--out === 0 && !sending) allAnswered.resolve();
  };
  for (let i = 0; i < args.count; i++) {
    const wait = t0 + i * gap - performance.now();
    if (wait >= 1) await sleep(wait);
    out++;
    sendOne(i).then(answered, (err: unknown) => {
      failure ??= { err };
      answered();
    });
  }
  sending = false;
  if (out > 0) await allAnswered.promise;
  if (failure) throw failure.err;
}

/** A producer or worker of the plain grpc-js relay (echo.ts): the latency rows' floor, with no Redis or with an LPUSH per message. */
async function relayRole(): Promise<Role> {
  const { connectRelay } = await import("./echo.js");
  let relay!: Awaited<ReturnType<typeof connectRelay>>;
  let progressMs = 50;
  const decoder = new TextDecoder();
  return {
    async connect(args) {
      relay = await connectRelay(args.address);
    },
    async prepare(args) {
      progressMs = args.progressMs;
      tally.reset(args);
    },
    go() {
      relay.subscribe((b) => {
        tally.started(JSON.parse(decoder.decode(b)) as JsonItem);
        tally.count();
      });
      tally.startReporting(progressMs);
    },
    stop: () => relay.unsubscribe(),
    produce() {
      return Promise.reject(new Error("the relay only sends paced items"));
    },
    paced: (args) => paced(args, (i) => relay.publish(Buffer.from(JSON.stringify(jsonItem(i, monoUs()))), args.push)),
    async close() {
      relay.close();
    },
  };
}

/** A plain grpc-js echo: the cost of one hop with nothing behind it (echo.ts). */
async function echoOps(): Promise<Record<string, (args: EchoArgs & { redisPath?: string }) => Promise<unknown>>> {
  const echo = await import("./echo.js");
  let server: Awaited<ReturnType<typeof echo.serveEcho>> | undefined;
  return {
    async serve(args) {
      server = await echo.serveEcho(args.redisPath);
      return server.address;
    },
    async call(args) {
      return echo.callEcho(args.address, args.kind, args.calls, args.bytes);
    },
    async close() {
      await server?.close();
    },
  };
}

async function main(): Promise<void> {
  const roles: Record<string, () => Promise<Role>> = { switchyard: switchyardRole, bullmq: bullmqRole, relay: relayRole };
  const role = await roles[system]?.();
  const echo = system === "echo" ? await echoOps() : undefined;
  if (!role && !echo) throw new Error(`agent: unknown system "${system}" (switchyard, bullmq, relay or echo)`);
  const ops: Record<string, (args: never) => Promise<unknown>> = echo ?? {
    connect: (args: Record<string, string>) => role!.connect(args),
    prepare: (args: ConsumeArgs) => role!.prepare(args),
    go: async () => role!.go(),
    stop: async () => {
      await role!.stop();
      return tally.finish();
    },
    produce: (args: ProduceArgs) => role!.produce(args),
    paced: (args: PacedArgs) => role!.paced(args),
    close: () => role!.close(),
  };
  process.on("message", (msg: AgentRequest) => {
    const op = ops[msg.op];
    if (!op) {
      send({ id: msg.id, error: `agent ${system}: no op "${msg.op}"` });
      return;
    }
    op(msg.args as never).then(
      (ok) => send({ id: msg.id, ok: ok ?? null }),
      (err: unknown) => send({ id: msg.id, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
    );
  });
  // The parent going away ends this process (its IPC channel closes).
  process.on("disconnect", () => process.exit(0));
  send({ id: 0, ok: "ready" });
}

main().catch((err: unknown) => {
  process.stderr.write(`agent ${system}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
