/**
 * The parent's side of agent.ts: forks an agent process per producer or
 * worker, sends it requests and collects its progress reports.
 */
import { fork, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { EchoKind } from "./echo.js";
import { leftovers, within } from "./lib.js";

/** A system an agent runs. */
export type AgentSystem = "switchyard" | "bullmq" | "relay" | "echo";

export interface AgentRequest {
  id: number;
  op: string;
  args: unknown;
}

export type AgentReply = { id: number; ok: unknown } | { id: number; error: string };

/** A worker's count so far and when it handled its last item (monoUs). */
export interface Progress {
  handled: number;
  lastAt: number;
}

export interface ConsumeArgs {
  queue: string;
  concurrency: number;
  /** Record enqueue→handler latency for sequence numbers below this (0: none). */
  latencyItems: number;
  /** How often to report progress (ms). */
  progressMs: number;
  /** Switchyard: the consumer group of a STREAM queue. */
  group?: string;
  /** The BullMQ agent: consume stream `queue` in group `group` with plain ioredis XREADGROUP/XACK instead. */
  rawStream?: boolean;
}

/** What a worker reports when stopped; latencies in µs by sequence number (NaN: not seen). */
export interface Consumed extends Progress {
  latencies?: number[];
}

export interface ProduceArgs {
  queue: string;
  items: number;
  perCall: number;
  inFlight: number;
  /** BullMQ's agent only: plain ioredis LPUSHes onto the key `queue` instead of jobs. */
  raw?: boolean;
}

export interface PacedArgs {
  queue: string;
  /** Items per second, open loop; 0: one after the other, each call awaited. */
  rate: number;
  count: number;
  /** The relay only: send on the stream whose server LPUSHes each message before it relays it. */
  push?: boolean;
}

export interface EchoArgs {
  address: string;
  kind: EchoKind;
  calls: number;
  bytes: number;
}

const here = dirname(fileURLToPath(import.meta.url));

/** One forked agent process. */
export class Agent {
  private nextId = 1;
  private readonly waiting = new Map<number, { ok(v: unknown): void; fail(e: Error): void }>();
  /** The latest progress report. */
  progress: Progress = { handled: 0, lastAt: 0 };
  /** Called on every progress report. */
  onProgress?: (p: Progress) => void;
  private exited?: Error;

  private constructor(
    readonly system: AgentSystem,
    readonly child: ChildProcess,
  ) {
    child.on("message", (msg: AgentReply | { progress: Progress }) => {
      if ("progress" in msg) {
        this.progress = msg.progress;
        this.onProgress?.(msg.progress);
        return;
      }
      const w = this.waiting.get(msg.id);
      if (!w) return;
      this.waiting.delete(msg.id);
      if ("error" in msg) w.fail(new Error(`agent ${system}: ${msg.error}`));
      else w.ok(msg.ok);
    });
    child.once("exit", (code, signal) => {
      this.exited = new Error(`agent ${system} (pid ${child.pid}) exited with ${signal ?? code}`);
      for (const w of this.waiting.values()) w.fail(this.exited);
      this.waiting.clear();
      leftovers.delete(child);
    });
  }

  /** Forks an agent running `system` and waits until it is ready. */
  static async start(system: AgentSystem, nodeArgs: string[] = [], env: NodeJS.ProcessEnv = process.env): Promise<Agent> {
    const child = fork(join(here, "agent.js"), [system], { execArgv: nodeArgs, env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    leftovers.add(child);
    const agent = new Agent(system, child);
    const ready = new Promise<void>((ok, fail) => {
      agent.waiting.set(0, { ok: () => ok(), fail });
    });
    await within(ready, 20_000, `agent ${system} to start`);
    return agent;
  }

  /** Sends `op` and resolves to its result. */
  request<T>(op: string, args: unknown = {}, timeoutMs = 300_000): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    const reply = new Promise<T>((ok, fail) => this.waiting.set(id, { ok: ok as (v: unknown) => void, fail }));
    this.child.send({ id, op, args } satisfies AgentRequest);
    return within(reply, timeoutMs, `agent ${this.system}: ${op}`);
  }

  /** Ends the process: its IPC channel closes and it exits; killed if it has not within 5 s. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((ok) => this.child.once("exit", ok));
    this.child.disconnect();
    await within(gone, 5000, `agent ${this.system} to exit`).catch(() => this.child.kill("SIGKILL"));
  }
}
