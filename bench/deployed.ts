/**
 * The shapes users deploy (issue 13): Switchyard's server as its own process
 * (`node dist/main.js`) on the bench's Redis; every producer and worker in a
 * process of its own (agent.ts), with the project's client and runWorker;
 * BullMQ's Queue and Worker in the same shapes on the same Redis.
 *
 * Consume rows prefill a queue (not timed), then start the workers at once and
 * time until the last item is done: for Switchyard reliable queues, until the
 * processing list is empty after the last handler ran (its ack applied);
 * simple queues, until the last handler ran (the item left Redis when popped);
 * BullMQ, until the last `completed` event (its move-to-completed applied).
 * Enqueue rows are timed inside the producer process. Latency rows stamp
 * each item with its send time (CLOCK_MONOTONIC, shared by all processes) and
 * read it in the worker's handler.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Queue } from "bullmq";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../dist/client/client.js";
import { Agent, type Consumed } from "./agents.js";
import { PUSHED, type EchoKind } from "./echo.js";
import { deleteKeys, type BenchRedis } from "./env.js";
import { BULL_OPTS, fresh, syQueue } from "./throughput.js";
import { startServer } from "./streams.js";
import { deferred, jsonItem, leftovers, log, monoUs, pool, sleep, spread, waitFor, within, type Spread } from "./lib.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const PROGRESS_MS = 5;

export type System = "switchyard" | "bullmq";
/** What the latency rows measure: a system, or the relay floor under it, without Redis or with an LPUSH per item. */
export type LatencySystem = System | "relay" | "relay-push";
export type Mode = "reliable" | "simple";

/** Options for the deployed set-up. */
export interface DeployedOptions {
  /** Extra node arguments for the server child (profiling, preloads). */
  serverNodeArgs?: string[];
  /** Worker processes per system (the most any row uses). */
  workers?: number;
  /** PYTHONPATH with the generated stubs, for the Python worker row. */
  pythonPath?: string;
  /** Extra node arguments for the worker and producer processes (profiling). */
  agentNodeArgs?: string[];
  /** Systems to start agents for (default both). */
  systems?: System[];
  /** Environment for the server child and the echo server (e.g. SY_H2_WINDOW with stage-hooks.js in serverNodeArgs). */
  serverEnv?: Record<string, string>;
}

/** The server child, the agents and an admin client, for the whole deployed part of a run. */
export class Deployed {
  private constructor(
    private readonly redis: BenchRedis,
    private readonly server: ChildProcess,
    readonly address: string,
    private readonly admin: SwitchyardClient,
    private readonly workers: Record<System, Agent[]>,
    private readonly producers: Record<System, Agent>,
    private readonly options: DeployedOptions,
  ) {}

  static async start(redis: BenchRedis, options: DeployedOptions = {}): Promise<Deployed> {
    const { child, address } = await startServer(`unix://${redis.socketPath}`, options.serverNodeArgs ?? [], options.serverEnv);
    leftovers.add(child);
    const admin = new SwitchyardClient(address);
    const n = options.workers ?? 4;
    const started = async (system: System) => {
      const agents = await Promise.all(Array.from({ length: n + 1 }, () => Agent.start(system, options.agentNodeArgs)));
      const args = system === "switchyard" ? { address } : { redisPath: redis.socketPath };
      await Promise.all(agents.map((a) => a.request("connect", args)));
      return agents;
    };
    const systems = options.systems ?? ["switchyard", "bullmq"];
    const sy = systems.includes("switchyard") ? await started("switchyard") : [];
    const bull = systems.includes("bullmq") ? await started("bullmq") : [];
    log(`deployed: switchyard server pid ${child.pid} on ${address}; ${n} worker processes and a producer per system (${systems.join(", ")})`);
    return new Deployed(redis, child, address, admin, { switchyard: sy.slice(1), bullmq: bull.slice(1) }, { switchyard: sy[0], bullmq: bull[0] }, options);
  }

  /** The server child's pid (diagnostics attach to it). */
  get serverPid(): number {
    return this.server.pid!;
  }

  /** The producer process's pid by system (0 for a system started without agents). */
  get producerPids(): Record<System, number> {
    const pid = (system: System) => (this.producers[system] as Agent | undefined)?.child.pid ?? 0;
    return { switchyard: pid("switchyard"), bullmq: pid("bullmq") };
  }

  /** The worker processes' pids by system. */
  get workerPids(): Record<System, number[]> {
    return { switchyard: this.workers.switchyard.map((a) => a.child.pid!), bullmq: this.workers.bullmq.map((a) => a.child.pid!) };
  }

  async stop(): Promise<void> {
    const settled = <T>(p?: Promise<T>) => p?.catch(() => undefined);
    const [echo, client, relay] = await Promise.all([settled(this.echoServer), settled(this.echoClient), settled(this.relayAgents)]);
    const agents = [
      echo?.server, client, relay?.producer, relay?.worker,
      ...this.workers.switchyard, ...this.workers.bullmq, this.producers.switchyard, this.producers.bullmq,
    ];
    await Promise.all(agents.filter((a): a is Agent => a !== undefined).map((a) => a.stop()));
    this.admin.close();
    this.server.kill("SIGTERM");
    await within(new Promise((ok) => (this.server.exitCode !== null ? ok(undefined) : this.server.once("exit", ok))), 15_000, "switchyard server to exit").catch(
      () => this.server.kill("SIGKILL"),
    );
    leftovers.delete(this.server);
  }

  // ------------------------------------------------------------ queues

  private syQueue(prefix: string, mode: Mode, recovery: boolean): Promise<string> {
    return syQueue(this.admin, prefix, mode, recovery);
  }

  private async prefill(system: System, name: string, items: number): Promise<void> {
    if (system === "switchyard") {
      const batch = Array.from({ length: 1000 }, () => JSON.stringify(jsonItem(0)));
      await pool(Math.ceil(items / 1000), 4, () => this.admin.enqueue(name, batch));
      return;
    }
    const queue = new Queue(name, { connection: this.redis.peerOptions });
    const jobs = Array.from({ length: 1000 }, () => ({ name: "j", data: jsonItem(0), opts: BULL_OPTS }));
    await pool(Math.ceil(items / 1000), 4, () => queue.addBulk(jobs));
    await queue.close();
  }

  private async drop(system: System, name: string): Promise<void> {
    if (system === "switchyard") await this.admin.deleteQueue(name, { purge: true });
    else await deleteKeys(this.redis.plain, `bull:${name}:*`);
  }

  // ------------------------------------------------------------ consume

  /**
   * `workers` processes × concurrency `c` consume `items` prefilled items;
   * resolves to items per second. BullMQ has one mode (its jobs are kept
   * until completed, like a reliable queue); `mode` applies to Switchyard.
   * `afterPrefill` runs between the prefill and the start (diagnostics).
   */
  async consume(system: System, mode: Mode, workers: number, c: number, items: number, afterPrefill?: () => Promise<void>): Promise<number> {
    const name = system === "switchyard" ? await this.syQueue(mode === "reliable" ? "rel" : "sim", mode, mode === "reliable") : fresh("bw");
    await this.prefill(system, name, items);
    await afterPrefill?.();
    const agents = this.workers[system].slice(0, workers);
    const result = await this.run(agents, { queue: name, concurrency: c, latencyItems: 0, progressMs: PROGRESS_MS }, items, async (t0, lastAt) => {
      if (system !== "switchyard" || mode !== "reliable") return lastAt;
      const { plain } = this.redis;
      await waitFor(async () => (await plain.llen(`${name}.processing`)) === 0, 60_000, "the last acks to be applied", 1);
      return Math.max(lastAt, monoUs());
    });
    const left = system === "switchyard" ? await this.redis.plain.llen(name) : await this.redis.plain.llen(`bull:${name}:wait`);
    if (left !== 0) throw new Error(`${system} ${mode} consume: ${left} items left in ${name}`);
    await this.drop(system, name);
    return (items / (result.endUs - result.t0)) * 1e6;
  }

  /**
   * Starts `agents` as workers, waits until they have handled `items` in all
   * and `end` says when the run ended, stops them, checks the count.
   */
  private async run(
    agents: Agent[],
    args: { queue: string; concurrency: number; latencyItems: number; progressMs: number },
    items: number,
    end: (t0: number, lastAt: number) => Promise<number>,
    /** Sends the items, once the workers have started (latency rows); else they were prefilled. */
    feed?: () => Promise<void>,
  ): Promise<{ t0: number; endUs: number; consumed: Consumed[] }> {
    await Promise.all(agents.map((a) => a.request("prepare", args)));
    const all = deferred();
    const handled = () => agents.reduce((n, a) => n + a.progress.handled, 0);
    for (const a of agents) {
      a.progress = { handled: 0, lastAt: 0 };
      a.onProgress = () => {
        if (handled() >= items) all.resolve();
      };
    }
    const t0 = monoUs();
    await Promise.all(agents.map((a) => a.request("go")));
    const what = `${items} items to be handled by ${agents.length} ${agents[0].system} worker(s)`;
    await within(Promise.all([all.promise, feed?.()]), 300_000, what);
    const endUs = await end(t0, Math.max(...agents.map((a) => a.progress.lastAt)));
    const consumed = await Promise.all(agents.map((a) => a.request<Consumed>("stop")));
    for (const a of agents) a.onProgress = undefined;
    const total = consumed.reduce((n, c) => n + c.handled, 0);
    if (total !== items) throw new Error(`${agents[0].system} workers handled ${total} items, expected ${items}`);
    return { t0, endUs, consumed };
  }

  // ------------------------------------------------------------ stream queues

  /** Appends `items` JSON items to stream `key` with plain pipelined XADDs (the prefill, not timed). */
  private async prefillStream(key: string, items: number): Promise<void> {
    const value = JSON.stringify(jsonItem(0));
    await pool(Math.ceil(items / 1000), 4, async () => {
      const p = this.redis.plain.pipeline();
      for (let i = 0; i < 1000; i++) p.xadd(key, "*", "payload", value);
      await p.exec();
    });
  }

  /**
   * One worker process at concurrency `c` consumes `items` prefilled stream
   * entries in a consumer group: Switchyard's runWorker on a STREAM queue, or
   * plain ioredis XREADGROUP/XACK (`raw`); resolves to items per second, timed
   * until the group has nothing pending (the last XACK applied).
   */
  async consumeStream(system: "switchyard" | "raw", c: number, items: number): Promise<number> {
    const name = fresh(system === "switchyard" ? "st" : "rs");
    if (system === "switchyard") {
      await this.admin.createQueue({ name, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }] });
    } else {
      await this.redis.plain.xgroup("CREATE", name, "g", "0", "MKSTREAM");
    }
    await this.prefillStream(name, items);
    const agent = this.workers[system === "switchyard" ? "switchyard" : "bullmq"][0];
    const args = { queue: name, group: "g", rawStream: system === "raw", concurrency: c, latencyItems: 0, progressMs: PROGRESS_MS };
    const result = await this.run([agent], args, items, async (_t0, lastAt) => {
      await waitFor(async () => ((await this.redis.plain.xpending(name, "g")) as [number])[0] === 0, 60_000, "the last XACKs to be applied", 1);
      return Math.max(lastAt, monoUs());
    });
    if (system === "switchyard") await this.admin.deleteQueue(name, { purge: true });
    else await this.redis.plain.unlink(name);
    return (items / (result.endUs - result.t0)) * 1e6;
  }

  /**
   * Appends `entries` JSON items through Switchyard (1000 per Enqueue) to a
   * STREAM queue trimmed at MAXLEN ~ `maxLen`; resolves to the stream's
   * length and its MEMORY USAGE (bytes, every node sampled).
   */
  async streamMemory(entries: number, maxLen: number): Promise<{ length: number; bytes: number }> {
    const name = fresh("mem");
    await this.admin.createQueue({ name, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: BigInt(maxLen) } });
    const batch = Array.from({ length: 1000 }, () => JSON.stringify(jsonItem(0)));
    await pool(Math.ceil(entries / 1000), 4, () => this.admin.enqueue(name, batch));
    const length = await this.redis.plain.xlen(name);
    const bytes = Number(await this.redis.plain.call("MEMORY", "USAGE", name, "SAMPLES", "0"));
    await this.admin.deleteQueue(name, { purge: true });
    return { length, bytes };
  }

  // ------------------------------------------------------------ enqueue

  /** One producer process enqueues `items` in calls of `perCall`, `inFlight` at once; resolves to items per second. */
  async enqueue(system: System, items: number, perCall: number, inFlight: number, producer = this.producers[system]): Promise<number> {
    const name = system === "switchyard" ? await this.syQueue("enq", "reliable", false) : fresh("enq");
    const ms = await producer.request<number>("produce", { queue: name, items, perCall, inFlight });
    const count = system === "switchyard" ? await this.redis.plain.llen(name) : await this.redis.plain.llen(`bull:${name}:wait`);
    if (count !== items) throw new Error(`${system} enqueue: ${count} items in ${name}, expected ${items}`);
    await this.drop(system, name);
    return (items / ms) * 1000;
  }

  /** A producer process pushes `items` with plain ioredis LPUSHes (`perCall` values each): what Redis alone costs. */
  async rawEnqueue(items: number, perCall: number, inFlight: number): Promise<number> {
    const key = fresh("raw");
    const ms = await this.producers.bullmq.request<number>("produce", { queue: key, items, perCall, inFlight, raw: true });
    const count = await this.redis.plain.llen(key);
    if (count !== items) throw new Error(`raw enqueue: ${count} items in ${key}, expected ${items}`);
    await this.redis.plain.unlink(key);
    return (items / ms) * 1000;
  }

  /** A Switchyard producer process whose client does not coalesce enqueue() calls (diagnostic). */
  async uncoalescedProducer(): Promise<Agent> {
    const agent = await Agent.start("switchyard");
    await agent.request("connect", { address: this.address, coalesce: "off" });
    return agent;
  }

  // ------------------------------------------------------------ latency

  /**
   * A producer process sends `warmup + items` single items at `rate`/s to a
   * waiting worker process with concurrency `c`; resolves to the spread of
   * enqueue→handler latency (ms) of the last `items`.
   */
  async latency(system: LatencySystem, rate: number, items: number, warmup: number, c: number): Promise<Spread> {
    return spread(await this.latencySamples(system, rate, items, warmup, c));
  }

  /**
   * latency(), as every item's latency (ms), in send order. The "relay" is
   * the floor under Switchyard's: a plain grpc-js relay (echo.ts) in the
   * server's place, with no Redis behind it; "relay-push" the same relay
   * LPUSHing each message (plain ioredis) before it relays and answers it.
   */
  async latencySamples(system: LatencySystem, rate: number, items: number, warmup: number, c: number): Promise<number[]> {
    const name = system === "switchyard" ? await this.syQueue("lat", "reliable", true) : fresh("lat");
    const relayed = system === "relay" || system === "relay-push";
    const { producer, worker } = relayed ? await this.relay() : { producer: this.producers[system], worker: this.workers[system][0] };
    const total = warmup + items;
    const feed = async () => {
      await sleep(200); // the worker is waiting on the empty queue
      await producer.request("paced", { queue: name, rate, count: total, push: system === "relay-push" });
    };
    const args = { queue: name, concurrency: c, latencyItems: total, progressMs: 50 };
    const { consumed } = await this.run([worker], args, total, async (_t0, lastAt) => lastAt, feed);
    if (!relayed) await this.drop(system, name);
    else if (system === "relay-push") await this.redis.plain.unlink(PUSHED);
    const lat = consumed[0].latencies!.slice(warmup).map((us) => us / 1000);
    if (lat.some((x) => !Number.isFinite(x))) throw new Error(`${system} latency: an item was not seen by the handler`);
    return lat;
  }

  // ------------------------------------------------------------ echo

  private echoServer?: Promise<{ server: Agent; address: string }>;
  private echoClient?: Promise<Agent>;
  private relayAgents?: Promise<{ producer: Agent; worker: Agent }>;

  /** The plain grpc-js echo and relay server (a process of its own, with the server child's node arguments). */
  private serveEcho(): Promise<{ server: Agent; address: string }> {
    return (this.echoServer ??= (async () => {
      const server = await Agent.start("echo", this.options.serverNodeArgs ?? [], { ...process.env, ...this.options.serverEnv });
      return { server, address: await server.request<string>("serve", { redisPath: this.redis.socketPath }) };
    })());
  }

  /** Serial round trips of `bytes` through a plain grpc-js echo (server and client processes); resolves to calls per second. */
  async echo(kind: EchoKind, calls: number, bytes: number): Promise<number> {
    const [{ address }, client] = await Promise.all([this.serveEcho(), (this.echoClient ??= Agent.start("echo"))]);
    const rate = await client.request<number>("call", { address, kind, calls, bytes });
    if (kind === "push") await this.redis.plain.unlink(PUSHED);
    return rate;
  }

  /** The echo server's and the echo client's pids (diagnostics read their CPU time); starts them if need be. */
  async echoPids(): Promise<{ server: number; client: number }> {
    const [{ server }, client] = await Promise.all([this.serveEcho(), (this.echoClient ??= Agent.start("echo"))]);
    return { server: server.child.pid!, client: client.child.pid! };
  }

  /** The relay's pids: the echo server (the relay), its producer and its worker; starts them if need be. */
  async relayPids(): Promise<{ server: number; producer: number; worker: number }> {
    const [{ server }, { producer, worker }] = await Promise.all([this.serveEcho(), this.relay()]);
    return { server: server.child.pid!, producer: producer.child.pid!, worker: worker.child.pid! };
  }

  /** A producer and a worker process of the relay, connected to the echo server. */
  private relay(): Promise<{ producer: Agent; worker: Agent }> {
    return (this.relayAgents ??= (async () => {
      const { address } = await this.serveEcho();
      const [producer, worker] = await Promise.all([Agent.start("relay", this.options.agentNodeArgs), Agent.start("relay", this.options.agentNodeArgs)]);
      await Promise.all([producer, worker].map((a) => a.request("connect", { address })));
      return { producer, worker };
    })());
  }

  // ------------------------------------------------------------ Python

  /** The Python worker (python-worker.py) at credit `c` on a prefilled reliable queue; resolves to items per second. */
  async python(c: number, items: number): Promise<number> {
    const name = await this.syQueue("py", "reliable", true);
    await this.prefill("switchyard", name, items);
    const script = join(root, "bench", "python-worker.py");
    const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: this.options.pythonPath ?? "", PYTHONDONTWRITEBYTECODE: "1" };
    for (const v of ["http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]) delete env[v];
    const child = spawn("/usr/bin/python3", [script, this.address, name, String(c)], { env, stdio: ["pipe", "pipe", "inherit"] });
    leftovers.add(child);
    try {
      const lines = createInterface({ input: child.stdout! });
      const ready = deferred();
      const all = deferred();
      const finished = deferred<number>();
      let handled = 0;
      let lastAt = 0;
      lines.on("line", (line) => {
        const [what, n, at] = line.split(" ");
        if (what === "ready") ready.resolve();
        else if (what === "progress" || what === "done") {
          handled = Number(n);
          lastAt = Number(at);
          if (handled >= items) all.resolve();
          if (what === "done") finished.resolve(handled);
        }
      });
      child.once("exit", (code) => {
        const err = new Error(`python-worker.py exited with code ${code}`);
        ready.reject(err);
        all.reject(err);
        finished.reject(err);
      });
      await within(ready.promise, 20_000, "the Python worker to connect");
      const t0 = monoUs();
      child.stdin!.write("go\n");
      await within(all.promise, 300_000, `${items} items to be handled by the Python worker`);
      await waitFor(async () => (await this.redis.plain.llen(`${name}.processing`)) === 0, 60_000, "the Python worker's last acks", 1);
      const endUs = Math.max(lastAt, monoUs());
      child.stdin!.write("stop\n");
      const total = await within(finished.promise, 20_000, "the Python worker to stop");
      if (total !== items) throw new Error(`the Python worker handled ${total} items, expected ${items}`);
      await this.drop("switchyard", name);
      return (items / (endUs - t0)) * 1e6;
    } finally {
      child.kill("SIGKILL");
      leftovers.delete(child);
    }
  }
}
