/**
 * Starts a private Redis Cluster for tests: six redis-server children on free
 * loopback ports (3 masters, 3 replicas), joined with `redis-cli --cluster create`.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Cluster, Redis } from "ioredis";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";

const run = promisify(execFile);

/** A cluster node: its loopback port and its redis-server child. */
export interface ClusterNode {
  host: string;
  port: number;
  server: EmbeddedRedis;
}

/** A master as it describes itself: its node id and the slot ranges it serves. */
export interface ClusterMaster {
  node: ClusterNode;
  id: string;
  slots: [number, number][];
}

/** The master among `masters` that serves hash slot `slot`. */
export function ownerOf(masters: ClusterMaster[], slot: number): ClusterMaster | undefined {
  return masters.find((m) => m.slots.some(([first, last]) => slot >= first && slot <= last));
}

/** A slot on its way from one master to another. */
export interface SlotMigration {
  /** MIGRATEs these keys of the slot now, leaving the others where they are. */
  move(...keys: string[]): Promise<void>;
  /**
   * MIGRATEs the slot's keys one by one (pausing `pauseMs` after each, so
   * clients meet ASK and TRYAGAIN), then SETSLOT NODE on every master.
   * Resolves to the number of keys moved.
   */
  finish(pauseMs?: number): Promise<number>;
}

/** A running test cluster. */
export interface TestCluster {
  /** Seed nodes, as Switchyard's config takes them. */
  seeds: { host: string; port: number }[];
  nodes: ClusterNode[];
  /** A plain ioredis Cluster client (connected), as any other Redis user would have. */
  plain: Cluster;
  /** Every master, each as it describes itself (CLUSTER NODES, its "myself" line). */
  masters(): Promise<ClusterMaster[]>;
  /**
   * Starts moving hash slot `slot` to master `to` the way `redis-cli --cluster
   * reshard` does: SETSLOT IMPORTING on `to`, MIGRATING on the owner. Until
   * `finish`, the slot is migrating with every key still on its owner.
   */
  migrateSlot(slot: number, to: ClusterMaster): Promise<SlotMigration>;
  /** Stops every node and removes the folder. */
  stop(): Promise<void>;
}

const NODES = 6;
const HOST = "127.0.0.1";
/** Redis's cluster bus listens on port + 10000. */
const BUS_OFFSET = 10_000;

function portIsFree(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const server = createServer();
    server.once("error", () => ok(false));
    server.listen(port, HOST, () => server.close(() => ok(true)));
  });
}

/**
 * A random base port in 10000–22000 whose `count` ports and their bus ports are free. Below Linux's
 * ephemeral range (from 32768), bus ports included: a port found free there can be taken before its node
 * binds it by any listener on port 0 or outgoing connection of the tests running beside this one.
 */
export async function freeBasePort(count = NODES): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 10_000 + Math.floor(Math.random() * (12_000 - count));
    const ports = Array.from({ length: count }, (_, i) => base + i);
    const free = await Promise.all(ports.flatMap((p) => [portIsFree(p), portIsFree(p + BUS_OFFSET)]));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no ${count} free loopback ports (and bus ports) found in 10000-22000`);
}

/** Runs `fn` on a connection of its own to the node at `port`. */
async function withNode<T>(port: number, fn: (node: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await client.connect();
    return await fn(client);
  } finally {
    client.disconnect();
  }
}

/** What one node says about the cluster: "ok" once it is fully formed, or what it is still missing. */
function nodeState(port: number): Promise<string> {
  return withNode(port, async (client) => {
    const info = String(await client.cluster("INFO"));
    if (!/cluster_state:ok/.test(info) || !/cluster_slots_ok:16384/.test(info)) return "slots not ok";
    const lines = String(await client.cluster("NODES")).trim().split("\n");
    const replicas = lines.filter((l) => / (myself,)?slave /.test(l)).length;
    if (lines.length !== NODES || replicas !== NODES / 2) return `${lines.length} nodes, ${replicas} replicas`;
    const replication = String(await client.info("replication"));
    if (/role:slave/.test(replication) && !/master_link_status:up/.test(replication)) return "replica not in sync";
    return "ok";
  });
}

/** The node's own line of CLUSTER NODES, read as a master; undefined for a replica. */
function describeMaster(node: ClusterNode): Promise<ClusterMaster | undefined> {
  return withNode(node.port, async (client) => {
    const line = String(await client.cluster("NODES")).split("\n").find((l) => / myself,master /.test(l));
    if (!line) return undefined;
    const [id, , , , , , , , ...rest] = line.trim().split(" ");
    const slots = rest
      .filter((r) => /^\d+(-\d+)?$/.test(r))
      .map((r) => r.split("-").map(Number))
      .map(([a, b]) => [a, b ?? a] as [number, number]);
    return { node, id, slots };
  });
}

/**
 * Resolves once every node sees all slots served, three masters and three
 * replicas, and every replica's link to its master is up.
 */
async function waitUntilOk(ports: number[], timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let states: string[] = [];
  while (Date.now() < deadline) {
    states = await Promise.all(ports.map(nodeState));
    if (states.every((s) => s === "ok")) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`cluster not formed after ${timeoutMs} ms: ${JSON.stringify(states)}`);
}

async function startNodes(dir: string, base: number): Promise<ClusterNode[]> {
  const started = await Promise.allSettled(
    Array.from({ length: NODES }, (_, i) =>
      startEmbeddedRedis({
        dir: join(dir, String(base + i)),
        port: base + i,
        appendOnly: true,
        extraArgs: [
          "--cluster-enabled", "yes",
          "--cluster-config-file", "nodes.conf",
          // Nodes ping each other at least every half timeout, so a shorter one forms the cluster
          // sooner; 3 s still gives a loaded machine room before a node is suspected to have failed.
          "--cluster-node-timeout", "3000",
          // Replicas sync at once instead of waiting 5 s for more replicas to share the transfer.
          "--repl-diskless-sync-delay", "0",
        ],
      }),
    ),
  );
  const servers = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    await Promise.all(servers.map((s) => s.kill()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return servers.map((server, i) => ({ host: HOST, port: base + i, server }));
}

/**
 * Starts a 6-node cluster in a fresh temp folder and waits until it is fully
 * formed (see waitUntilOk). A port taken between the check and the start
 * (another test file starting its cluster) makes it try another base port.
 */
export async function startCluster(): Promise<TestCluster> {
  const dir = mkdtempSync(join(tmpdir(), "sy-cluster-"));
  let nodes: ClusterNode[] | undefined;
  try {
    for (let attempt = 0; !nodes; attempt++) {
      const base = await freeBasePort();
      try {
        nodes = await startNodes(join(dir, `try-${attempt}`), base);
      } catch (err) {
        if (attempt >= 4) throw err;
      }
    }
    const addresses = nodes.map((n) => `${n.host}:${n.port}`);
    await run("redis-cli", ["--cluster", "create", ...addresses, "--cluster-replicas", "1", "--cluster-yes"], { timeout: 30_000 });
    await waitUntilOk(nodes.map((n) => n.port));
  } catch (err) {
    await Promise.all((nodes ?? []).map((n) => n.server.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const all = nodes;
  const seeds = all.map(({ host, port }) => ({ host, port }));
  const plain = new Cluster(seeds, { lazyConnect: true });
  const stop = async () => {
    plain.disconnect();
    await Promise.all(all.map((n) => n.server.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await plain.connect();
  } catch (err) {
    await stop();
    throw err;
  }
  const masters = async () =>
    (await Promise.all(all.map(describeMaster))).filter((m): m is ClusterMaster => m !== undefined);
  return {
    seeds,
    nodes: all,
    plain,
    masters,
    async migrateSlot(slot, to) {
      const current = await masters();
      const from = ownerOf(current, slot);
      if (!from) throw new Error(`no master serves slot ${slot}`);
      if (from.id === to.id) throw new Error(`slot ${slot} is on ${to.node.port} already`);
      await withNode(to.node.port, (dst) => dst.cluster("SETSLOT", slot, "IMPORTING", from.id));
      await withNode(from.node.port, (src) => src.cluster("SETSLOT", slot, "MIGRATING", to.id));
      const move = (src: Redis, keys: string[]) => src.migrate(to.node.host, to.node.port, "", 0, 5000, "KEYS", ...keys);
      return {
        move: (...keys) => withNode(from.node.port, async (src) => void (await move(src, keys))),
        finish: async (pauseMs = 0) => {
          const moved = await withNode(from.node.port, async (src) => {
            let n = 0;
            for (let i = 0; i < 10_000; i++) {
              const keys = (await src.cluster("GETKEYSINSLOT", slot, 1)) as string[];
              if (keys.length === 0) return n;
              await move(src, keys);
              n += keys.length;
              if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
            }
            throw new Error(`slot ${slot} still had keys after 10000 migrations`);
          });
          // The new owner first, then the old one, then the others, as redis-cli does.
          const order = [to, from, ...current.filter((m) => m.id !== to.id && m.id !== from.id)];
          for (const m of order) await withNode(m.node.port, (c) => c.cluster("SETSLOT", slot, "NODE", to.id));
          return moved;
        },
      };
    },
    stop,
  };
}
