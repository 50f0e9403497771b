/**
 * Starts private Redis deployments for tests (never the machine's shared one):
 * a standalone redis-server on a unix socket, or, with
 * SWITCHYARD_TEST_REDIS=cluster (`npm run test:cluster`), a 6-node Redis Cluster.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { connect } from "node:net";
import { join } from "node:path";
import { Redis, type Cluster } from "ioredis";
import { afterAll, beforeAll, beforeEach } from "vitest";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import type { RedisTarget } from "../../src/redis/connection.js";
import { slotOf } from "../../src/redis/keys.js";
import { defineScripts } from "../../src/redis/scripts.js";
import { startCluster, type TestCluster } from "./cluster.js";

/** A test's own Redis and a plain client for checking its keys. */
export interface TestRedis {
  /** A plain ioredis client (a Cluster client on a cluster), as any other Redis user would have. */
  plain: Redis | Cluster;
  /** Where Switchyard finds it. */
  target: RedisTarget;
  /** The same, as environment variables for a Switchyard child process. */
  env: Record<string, string>;
  /** The node that holds `key` (by the plain client's slot table), for per-node commands such as INFO and CONFIG. */
  nodeFor(key: string): Redis;
  /** A connection to every node (masters and replicas), for per-node commands such as CLIENT LIST. */
  nodes(): Redis[];
  /** Deletes every key on every node. */
  flushAll(): Promise<void>;
  /** Stops the server(s) and removes their folder. */
  stop(): Promise<void>;
}

/** A standalone Redis, for tests that kill, restart or reach the server itself. */
export interface StandaloneRedis extends TestRedis {
  server: EmbeddedRedis;
  plain: Redis;
  socketPath: string;
}

/** A test cluster as a TestRedis, with the cluster itself for moving slots. */
export interface ClusterRedis extends TestRedis {
  plain: Cluster;
  cluster: TestCluster;
}

/** True when the suite runs against a Redis Cluster (`npm run test:cluster`). */
export const onCluster = process.env.SWITCHYARD_TEST_REDIS === "cluster";

/** Starts a redis-server on a unix socket in a fresh temp folder. */
export async function startStandaloneRedis(options: { appendOnly?: boolean } = {}): Promise<StandaloneRedis> {
  const dir = mkdtempSync(join(tmpdir(), "sy-redis-"));
  const server = await startEmbeddedRedis({ dir, appendOnly: options.appendOnly ?? false });
  const plain = new Redis({ path: server.socketPath });
  return {
    server,
    plain,
    socketPath: server.socketPath,
    target: { kind: "socket", path: server.socketPath },
    env: { SWITCHYARD_REDIS_URL: `unix://${server.socketPath}` },
    nodeFor: () => plain,
    nodes: () => [plain],
    flushAll: async () => void (await plain.flushall()),
    async stop() {
      plain.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Starts a 6-node Redis Cluster (3 masters, 3 replicas) on free loopback ports. */
export async function startClusterRedis(): Promise<ClusterRedis> {
  const cluster = await startCluster();
  const { plain } = cluster;
  const masters = () => plain.nodes("master");
  return {
    plain,
    target: { kind: "cluster", nodes: cluster.seeds },
    env: { SWITCHYARD_REDIS_CLUSTER_NODES: cluster.seeds.map((s) => `${s.host}:${s.port}`).join(",") },
    nodeFor(key) {
      const [address] = plain.slots[slotOf(key)];
      return masters().find((n) => `${n.options.host}:${n.options.port}` === address)!;
    },
    nodes: () => plain.nodes("all"),
    async flushAll() {
      await Promise.all(masters().map((n) => n.flushall()));
    },
    cluster,
    stop: () => cluster.stop(),
  };
}

/** Starts the Redis the suite runs against: standalone, or a cluster with SWITCHYARD_TEST_REDIS=cluster. */
export async function startRedis(options: { appendOnly?: boolean } = {}): Promise<TestRedis> {
  return onCluster ? startClusterRedis() : startStandaloneRedis(options);
}

/** How many deliveries a reliable queue's leases hash records as live (fields "<fence>@<owner>"). */
export async function liveDeliveries(plain: TestRedis["plain"] | Redis, leases: string): Promise<number> {
  return (await plain.hkeys(leases)).filter((field) => /^\d+@/.test(field)).length;
}

/**
 * The records a reliable queue's leases hash keeps besides its counters, for
 * live deliveries; empty once nothing is in flight.
 */
export async function leaseRecords(plain: TestRedis["plain"], leases: string): Promise<string[]> {
  return (await plain.hkeys(leases)).filter((field) => field !== "live" && field !== "completed");
}

/**
 * For a file that drives the scripts directly: a standalone Redis of its own and a connection with
 * Switchyard's scripts defined (`client`, set once the file's beforeAll ran), emptied before each test.
 */
export function scriptedRedis(): { readonly client: Redis; readonly redis: StandaloneRedis } {
  const db = {} as { client: Redis; redis: StandaloneRedis };
  beforeAll(async () => {
    db.redis = await startStandaloneRedis();
    db.client = new Redis({ path: db.redis.socketPath });
    defineScripts(db.client);
  });
  beforeEach(async () => {
    await db.client.flushall();
  });
  afterAll(async () => {
    db.client?.disconnect();
    await db.redis?.stop();
  });
  return db;
}

/** One command as MONITOR reports it: who sent it ("lua" for a script's calls, else the client's address) and its arguments. */
export interface MonitoredCommand {
  source: string;
  args: string[];
}

/**
 * Streams what `node` runs, by MONITOR on a socket of its own. Not ioredis's
 * monitor(): it leaves monitoring mode to a promise callback, so a first
 * command report that arrives in the same read as MONITOR's OK finds the
 * connection not yet monitoring and fails it with "Command queue state error".
 * Resolves once Redis answered OK, so every command run after that is seen.
 */
export async function monitorNode(node: Redis, seen: (command: MonitoredCommand) => void): Promise<{ stop(): void }> {
  const { path, host, port } = node.options;
  const socket = path ? connect(path) : connect(port!, host);
  let pending = "";
  let monitoring = false;
  await new Promise<void>((resolve, reject) => {
    socket.setEncoding("latin1");
    socket.once("error", reject);
    socket.on("data", (chunk: string) => {
      pending += chunk;
      let end: number;
      while ((end = pending.indexOf("\r\n")) >= 0) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 2);
        if (!monitoring) {
          if (line !== "+OK") return reject(new Error(`MONITOR answered ${line}`));
          monitoring = true;
          resolve();
        } else {
          seen(monitorLine(line));
        }
      }
    });
    socket.write("MONITOR\r\n");
  });
  return { stop: () => void socket.destroy() };
}

/** `+1796315635.421419 [0 unix:/tmp/x.sock] "hset" "k" "v\"1"` → source "unix:/tmp/x.sock", args ["hset", "k", "v\"1"]. */
function monitorLine(line: string): MonitoredCommand {
  const open = line.indexOf("[");
  const close = line.indexOf("]", open);
  const source = line.slice(open + 1, close).split(" ").slice(1).join(" ");
  const args = [...line.slice(close + 1).matchAll(/"((?:[^"\\]|\\.)*)"/g)].map(([, quoted]) =>
    quoted.replace(/\\(x[0-9a-f]{2}|.)/g, (_, e: string) =>
      e.length === 3 ? String.fromCharCode(parseInt(e.slice(1), 16)) : ({ n: "\n", r: "\r", t: "\t", a: "\x07", b: "\b" } as Record<string, string>)[e] ?? e,
    ),
  );
  return { source, args };
}
