/**
 * Row 7: 10,000 idle lease streams over 100 queues on one instance. The server
 * runs as a child process (`node dist/main.js`, configured by environment
 * variables) against its own redis-server, so the load generator's memory and
 * connections do not count: RSS is the child's VmRSS, connections are Redis'
 * CLIENT LIST less the benchmark's own.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { startEmbeddedRedis } from "../dist/redis/embedded.js";
import { SwitchyardClient, type LeaseSession } from "../dist/client/client.js";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { benchEnv } from "./env.js";
import { leftovers, log, sleep, within } from "./lib.js";

export interface StreamsShape {
  queues: number;
  streamsPerQueue: number;
}

export interface StreamsResult {
  /** Redis connections of the server with every stream open. */
  connections: number;
  /** … and with the queues declared but no stream open (the constant). */
  baseConnections: number;
  /** Server RSS growth per stream, from no stream to all open (KB). */
  rssKbPerStream: number;
  /** Server RSS with no stream and with every stream open (MB). */
  rssBeforeMb: number;
  rssAfterMb: number;
}

export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once("error", fail);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => ok(port));
    });
  });
}

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

/** Starts `node dist/main.js` and resolves to its address once it listens. */
export function startServer(redisUrl: string, nodeArgs: string[], env: Record<string, string> = {}): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(process.execPath, [...nodeArgs, "dist/main.js"], {
    env: {
      ...process.env,
      ...benchEnv,
      SWITCHYARD_REDIS_URL: redisUrl,
      SWITCHYARD_SHUTDOWN_GRACE: "2s",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return within(
    new Promise((ok, fail) => {
      let out = "";
      // BENCH_SERVER_STDOUT=FILE keeps what the child prints (say, V8's --trace-gc-nvp lines; gc-summary.mjs).
      const keep = process.env.BENCH_SERVER_STDOUT;
      child.stdout!.on("data", (chunk: Buffer) => {
        if (keep) appendFileSync(keep, chunk);
        out += chunk.toString();
        const m = /switchyard listening on (\S+)/.exec(out);
        if (m) ok({ child, address: m[1] });
      });
      child.once("exit", (code) => fail(new Error(`switchyard child exited with code ${code}`)));
    }),
    20_000,
    "switchyard child to listen",
  );
}

async function serverConnections(plain: Redis): Promise<number> {
  const mine = await plain.client("ID");
  const list = (await plain.client("LIST")) as string;
  return list.split("\n").filter((l) => l.startsWith("id=") && !l.startsWith(`id=${mine} `)).length;
}

export async function idleStreams(shape: StreamsShape, nodeArgs: string[] = []): Promise<StreamsResult> {
  const dir = mkdtempSync(join(tmpdir(), "sy-bench-streams-"));
  const port = await freePort();
  const redis = await startEmbeddedRedis({ dir, appendOnly: false, port, extraArgs: ["--maxclients", "20000"] });
  leftovers.add(redis.process);
  const plain = new Redis({ path: redis.socketPath });
  const { child, address } = await startServer(`redis://127.0.0.1:${port}`, nodeArgs);
  leftovers.add(child);
  const clients: SwitchyardClient[] = [];
  const sessions: LeaseSession[] = [];
  try {
    const admin = new SwitchyardClient(address);
    clients.push(admin);
    const names = Array.from({ length: shape.queues }, (_, i) => `{idle-${i}}`);
    for (const name of names) await admin.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });
    await sleep(1000);
    const baseConnections = await serverConnections(plain);
    const rssBefore = rssBytes(child.pid!);
    // One client (its own HTTP/2 connection) per queue, as one worker process per queue would have.
    for (const name of names) {
      const c = new SwitchyardClient(address, { channelOptions: { "grpc.use_local_subchannel_pool": 1 } });
      clients.push(c);
      const opened: Promise<unknown>[] = [];
      for (let i = 0; i < shape.streamsPerQueue; i++) {
        const s = c.lease(name, 1);
        sessions.push(s);
        opened.push(s.opened);
      }
      await within(Promise.all(opened), 30_000, `streams on ${name} to open`);
    }
    await sleep(1500);
    const connections = await serverConnections(plain);
    const rssAfter = rssBytes(child.pid!);
    const total = shape.queues * shape.streamsPerQueue;
    return {
      connections,
      baseConnections,
      rssKbPerStream: (rssAfter - rssBefore) / total / 1024,
      rssBeforeMb: rssBefore / 2 ** 20,
      rssAfterMb: rssAfter / 2 ** 20,
    };
  } finally {
    for (const s of sessions) s.cancel();
    for (const c of clients) c.close();
    child.kill("SIGTERM");
    await within(new Promise((ok) => (child.exitCode !== null ? ok(undefined) : child.once("exit", ok))), 15_000, "switchyard child to exit").catch(
      (err: unknown) => {
        log(String(err));
        child.kill("SIGKILL");
      },
    );
    plain.disconnect();
    await redis.stop();
    leftovers.delete(redis.process);
    leftovers.delete(child);
    rmSync(dir, { recursive: true, force: true });
  }
}
