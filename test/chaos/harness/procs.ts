/**
 * The real processes of the chaos suite: redis-server, Switchyard servers
 * (`node dist/main.js`) and workers (test/chaos/worker.mjs, and the Python
 * example). Every process started here is tracked and SIGKILLed by pid at the
 * end of its scenario (killStarted, first thing in each file's afterAll), and
 * never any other. No exit handler does it: vitest's fork workers end without
 * running one.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../../src/redis/embedded.js";
import type { Ledger, WorkerEvent } from "./ledger.js";
import { ARTIFACTS } from "./results.js";

export { ARTIFACTS };

const execFileP = promisify(execFile);

export const ROOT = resolve(import.meta.dirname, "../../..");
export const LOGS = join(ARTIFACTS, "logs");
const MAIN = join(ROOT, "dist", "main.js");
const WORKER = join(ROOT, "test", "chaos", "worker.mjs");
const PY_WORKER = join(ROOT, "examples", "python", "worker.py");
const PY_GENERATE = join(ROOT, "examples", "python", "generate.sh");
export const PYTHON = "/usr/bin/python3";

const started = new Set<ChildProcess>();

function track(child: ChildProcess): ChildProcess {
  started.add(child);
  child.once("exit", () => started.delete(child));
  return child;
}

const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** SIGKILLs every process this suite started that still runs (by pid, one at a time). */
export function killStarted(): void {
  for (const child of started) {
    if (alive(child) && child.pid) {
      try {
        process.kill(child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `check` until it is true; false after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, ms: number, every = 20): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(every);
  }
}

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (!alive(child)) return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((ok) => child.once("exit", (code, signal) => ok({ code, signal })));
}

/** An environment without the caller's Switchyard settings or proxies (loopback only). */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith("SWITCHYARD_") || /^(https?|grpc|all|no)_proxy$/i.test(k) || k.startsWith("VITEST") || k === "NODE_OPTIONS") continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

// ---------------------------------------------------------------------------
// Redis

/** A test-started standalone redis-server on a unix socket (restartable on the same data). */
export interface ChaosRedis {
  readonly dir: string;
  readonly socketPath: string;
  /** SWITCHYARD_REDIS_URL for it. */
  readonly url: string;
  /** A plain client, as any Redis user would have (reconnects after a restart). */
  readonly plain: Redis;
  pid(): number;
  /** SIGKILL, as a crash. */
  kill(): Promise<void>;
  /** Starts it again on the same folder (so on its AOF, when it has one). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts redis-server with AOF and `appendfsync always` (every acknowledged
 * write is on disk before the reply; `fsync: "everysec"` for throughput runs),
 * or with no persistence at all.
 */
export async function startChaosRedis(options: { aof: boolean; fsync?: "always" | "everysec" }): Promise<ChaosRedis> {
  const dir = mkdtempSync(join(tmpdir(), "sy-chaos-redis-"));
  const extraArgs = options.aof ? ["--appendfsync", options.fsync ?? "always"] : [];
  const start = () => startEmbeddedRedis({ dir, appendOnly: options.aof, extraArgs });
  let server: EmbeddedRedis = await start();
  track(server.process);
  const plain = new Redis({ path: server.socketPath, maxRetriesPerRequest: 3, retryStrategy: () => 100 });
  plain.on("error", () => undefined);
  return {
    dir,
    socketPath: server.socketPath,
    url: `unix://${server.socketPath}`,
    plain,
    pid: () => server.process.pid!,
    async kill() {
      await server.kill();
    },
    async restart() {
      server = await start();
      track(server.process);
      await until(() => plain.status === "ready", 5000);
    },
    async stop() {
      plain.disconnect();
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------
// Switchyard servers

/** A `node dist/main.js` process. */
export interface ServerProc {
  readonly name: string;
  readonly address: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly logFile: string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** host:port of its side HTTP port (/metrics), once it has printed it. */
  httpAddress(): string | undefined;
  alive(): boolean;
  kill(signal: NodeJS.Signals): void;
  /** Resident set size in bytes (from /proc), or 0 once it exited. */
  rss(): number;
}

/**
 * Starts a server on 127.0.0.1 (a free port) against `redisUrl` and resolves
 * once it prints `switchyard listening on host:port`. Its stderr (JSON logs)
 * goes to test-artifacts/chaos/logs/<name>.log.
 */
export async function startServer(
  name: string,
  redis: { url: string } | { clusterNodes: string },
  options: { env?: Record<string, string>; nodeArgs?: string[] } = {},
): Promise<ServerProc> {
  mkdirSync(LOGS, { recursive: true });
  const logFile = join(LOGS, `${name}.log`);
  const fd = openSync(logFile, "a");
  const target: Record<string, string> = "url" in redis ? { SWITCHYARD_REDIS_URL: redis.url } : { SWITCHYARD_REDIS_CLUSTER_NODES: redis.clusterNodes };
  const child = track(
    spawn(process.execPath, [...(options.nodeArgs ?? []), MAIN], {
      env: cleanEnv({
        ...target,
        SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
        // The side HTTP port (metrics, healthz): a free one, so several servers run side by side.
        SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0",
        // Open access (no tokens): the suite tests faults, not auth.
        SWITCHYARD_AUTH: "off",
        SWITCHYARD_LOG_LEVEL: "warn",
        SWITCHYARD_INSTANCE_ID: name,
        ...options.env,
      }),
      stdio: ["ignore", "pipe", fd],
    }),
  );
  closeSync(fd);
  const exited = exitOf(child);
  let httpAddress: string | undefined;
  const address = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`server ${name} did not listen within 20 s; see ${logFile}`)), 20_000);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(new Error(`server ${name} exited (code ${code}, signal ${signal}) before listening:\n${tail(logFile)}`));
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const metrics = /switchyard metrics on http:\/\/(\S+)\/metrics/.exec(line);
      if (metrics) httpAddress = metrics[1];
      const m = /switchyard listening on (\S+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
  });
  return {
    name,
    address,
    child,
    pid: child.pid!,
    logFile,
    exited,
    httpAddress: () => httpAddress,
    alive: () => alive(child),
    kill: (signal) => {
      if (alive(child)) process.kill(child.pid!, signal);
    },
    rss: () => {
      try {
        const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
        return m ? Number(m[1]) * 1024 : 0;
      } catch {
        return 0;
      }
    },
  };
}

/** Samples a server's RSS every 100 ms until stopped; `peakMb` is the highest so far. */
export function sampleRss(server: ServerProc): { readonly peakMb: number; stop(): number } {
  let peak = server.rss();
  const timer = setInterval(() => (peak = Math.max(peak, server.rss())), 100);
  return {
    get peakMb() {
      return peak / 1024 / 1024;
    },
    stop() {
      clearInterval(timer);
      return peak / 1024 / 1024;
    },
  };
}

function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, "utf8").trim().split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}

// ---------------------------------------------------------------------------
// Workers

/** A worker.mjs process; its events go to the ledger as they arrive. */
export interface WorkerProc {
  readonly name: string;
  readonly child: ChildProcess;
  readonly events: WorkerEvent[];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves with the first event (past or future) matching `pred`; rejects after `ms`. */
  waitFor(pred: (e: WorkerEvent) => boolean, ms: number, what?: string): Promise<WorkerEvent>;
  kill(signal: NodeJS.Signals): void;
  alive(): boolean;
}

export interface WorkerOptions {
  name: string;
  addresses: string[];
  queue: string;
  credit?: number;
  mode?: "ack" | "hold";
  /** ms each item takes before its ack. */
  delay?: number;
  poison?: "retry" | "crash";
  crashDelay?: number;
  /** The process ends itself after this long (default 90 s). */
  giveUpMs?: number;
}

export function startWorker(ledger: Ledger, o: WorkerOptions): WorkerProc {
  mkdirSync(LOGS, { recursive: true });
  const fd = openSync(join(LOGS, `${o.name}.log`), "a");
  const args = [
    WORKER, "--name", o.name, "--addresses", o.addresses.join(","), "--queue", o.queue,
    "--credit", String(o.credit ?? 10), "--mode", o.mode ?? "ack", "--delay", String(o.delay ?? 0),
    "--give-up", String(o.giveUpMs ?? 90_000),
  ];
  if (o.poison) args.push("--poison", o.poison, "--crash-delay", String(o.crashDelay ?? 0));
  const child = track(spawn(process.execPath, args, { env: cleanEnv({}), stdio: ["ignore", "pipe", fd] }));
  closeSync(fd);
  const events: WorkerEvent[] = [];
  const waiters = new Set<{ pred: (e: WorkerEvent) => boolean; ok: (e: WorkerEvent) => void }>();
  createInterface({ input: child.stdout! }).on("line", (line) => {
    let e: WorkerEvent;
    try {
      e = JSON.parse(line) as WorkerEvent;
    } catch {
      return;
    }
    events.push(e);
    ledger.onWorkerEvent(e);
    for (const w of waiters) {
      if (w.pred(e)) {
        waiters.delete(w);
        w.ok(e);
      }
    }
  });
  return {
    name: o.name,
    child,
    events,
    exited: exitOf(child),
    alive: () => alive(child),
    kill: (signal) => {
      if (alive(child)) process.kill(child.pid!, signal);
    },
    waitFor(pred, ms, what = "an event") {
      const seen = events.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((ok, fail) => {
        const w = { pred, ok: (e: WorkerEvent) => (clearTimeout(timer), ok(e)) };
        const timer = setTimeout(() => {
          waiters.delete(w);
          fail(new Error(`worker ${o.name}: no ${what} within ${ms} ms`));
        }, ms);
        waiters.add(w);
      });
    },
  };
}

// ---------------------------------------------------------------------------
// The Python example worker (examples/python/worker.py)

let pyStubs: Promise<string> | undefined;

/** Removes the generated Python stubs (call in afterAll of a file that used them). */
export async function removePythonStubs(): Promise<void> {
  const dir = await pyStubs?.catch(() => undefined);
  if (dir) rmSync(dir, { recursive: true, force: true });
  pyStubs = undefined;
}

/** Generates the Python stubs once per run (into a temp folder) and returns it. */
export function pythonStubs(): Promise<string> {
  pyStubs ??= (async () => {
    try {
      await execFileP(PYTHON, ["-c", "import grpc, grpc_tools"]);
    } catch (err) {
      throw new Error(
        `${PYTHON} cannot import grpc and grpc_tools (apt-get install python3-grpcio python3-grpc-tools): ${(err as { stderr?: string }).stderr ?? err}`,
      );
    }
    const dir = mkdtempSync(join(tmpdir(), "sy-chaos-pygen-"));
    await execFileP("sh", [PY_GENERATE, dir], { env: { ...process.env, PYTHON } });
    return dir;
  })();
  return pyStubs;
}

/** A `worker.py --hold n` process that holds `n` items; resolves once it prints HOLDING. */
export async function startPythonHolder(
  ledger: Ledger,
  o: { name: string; address: string; queue: string; n: number },
): Promise<{ child: ChildProcess; ids: string[]; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> }> {
  const stubs = await pythonStubs();
  mkdirSync(LOGS, { recursive: true });
  const fd = openSync(join(LOGS, `${o.name}.log`), "a");
  const child = track(
    spawn(PYTHON, [PY_WORKER, "--address", o.address, "--queue", o.queue, "--hold", String(o.n), "--timeout", "20"], {
      env: cleanEnv({ PYTHONPATH: stubs, PYTHONDONTWRITEBYTECODE: "1" }),
      stdio: ["ignore", "pipe", fd],
    }),
  );
  closeSync(fd);
  const exited = exitOf(child);
  const line = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${o.name}: no HOLDING line within 25 s`)), 25_000);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(new Error(`${o.name} exited (code ${code}, signal ${signal}) before HOLDING`));
    });
    createInterface({ input: child.stdout! }).on("line", (l) => {
      if (l.startsWith("HOLDING ")) {
        clearTimeout(timer);
        ok(l);
      }
    });
  });
  const ids = line.split(" ")[2].split(",").filter(Boolean);
  // worker.py prints ids only: its deliveries enter the ledger without tokens.
  const t = Date.now();
  for (const id of ids) ledger.onWorkerEvent({ e: "d", id, tok: "", w: o.name, t, s: 1, q: o.queue });
  return { child, ids, exited };
}
