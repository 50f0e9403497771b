/**
 * Connecting to a Redis Cluster whose nodes do not all say cluster_state:ok yet
 * (a cluster just created, a seed that agreed before the others): the connection
 * waits until every master says ok, and fails after clusterReadyTimeoutMs if
 * they never do. ioredis's Cluster#connect() alone left start-up hanging for
 * ever once its ready check met a node that said fail (ioredis issue 709).
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { freeBasePort } from "../helpers/cluster.js";

const run = promisify(execFile);
const log = createLogger("silent");
const timeouts = { commandTimeoutMs: 5000, keepAliveMs: 30_000, longestBlockMs: 1000 };

let dir: string;
let base: number;
const servers: EmbeddedRedis[] = [];
const ports = () => [0, 1, 2].map((i) => base + i);

async function onNode<T>(port: number, fn: (node: Redis) => Promise<T>): Promise<T> {
  const node = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  try {
    await node.connect();
    return await fn(node);
  } finally {
    node.disconnect();
  }
}

const stateOf = (port: number) =>
  onNode(port, async (n) => /cluster_state:(\w+)/.exec(String(await n.cluster("INFO")))?.[1] ?? "unknown");

async function untilEvery(state: "ok" | "fail"): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const states = await Promise.all(ports().map(stateOf));
    if (states.every((s) => s === state)) return;
    if (Date.now() > deadline) throw new Error(`nodes did not all say cluster_state:${state}: ${states.join(", ")}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Every node forgets who serves slot 0, so every node says cluster_state:fail (while all are up). */
async function breakSlotZero(): Promise<void> {
  for (const port of ports()) await onNode(port, (n) => n.cluster("DELSLOTS", 0));
  await untilEvery("fail");
}

/** The first master (it served slots 0-5460) takes slot 0 again; the others learn it from its gossip. */
async function mendSlotZero(): Promise<void> {
  await onNode(base, (n) => n.cluster("ADDSLOTS", 0));
}

/** A connection, or the error it failed with, or "pending" if it neither connected nor failed within `ms`. */
function settledWithin(connecting: Promise<RedisConnection>, ms: number): Promise<RedisConnection | Error | "pending"> {
  return Promise.race([
    connecting.catch((err: Error) => err),
    new Promise<"pending">((r) => setTimeout(() => r("pending"), ms)),
  ]);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-converging-"));
  base = await freeBasePort(3);
  for (const port of ports()) {
    servers.push(await startEmbeddedRedis({
      dir: join(dir, String(port)), port, appendOnly: false,
      extraArgs: ["--cluster-enabled", "yes", "--cluster-config-file", join(dir, `nodes-${port}.conf`)],
    }));
  }
  await run("redis-cli", ["--cluster", "create", ...ports().map((p) => `127.0.0.1:${p}`), "--cluster-yes"], { timeout: 30_000 });
  await untilEvery("ok");
}, 60_000);

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

describe("connecting to a Redis Cluster that is not ready yet", () => {
  it("waits until every master says cluster_state:ok, then serves keys on every master", async () => {
    await breakSlotZero();
    const connecting = connectRedis({ kind: "cluster", nodes: [{ host: "127.0.0.1", port: base }] }, log, { ...timeouts, clusterReadyTimeoutMs: 20_000 });
    // Not connected while no node says ok (ioredis's ready check has failed and it retries) …
    expect(await settledWithin(connecting, 1000)).toBe("pending");
    await mendSlotZero();
    // … and connected soon after they do: before, the first connect() never settled.
    const conn = await settledWithin(connecting, 10_000);
    if (conn === "pending" || conn instanceof Error) throw new Error(`connectRedis: ${String(conn)}`);
    try {
      expect(conn.ready()).toBe(true);
      // {a} {b} {c} hash to slots on each of the three masters.
      for (const key of ["{a}", "{b}", "{c}"]) {
        await conn.client.set(key, `at ${key}`);
        expect(await conn.client.get(key)).toBe(`at ${key}`);
      }
    } finally {
      await conn.close();
    }
  }, 30_000);

  it("fails after clusterReadyTimeoutMs when the cluster never says ok", async () => {
    await untilEvery("ok");
    await breakSlotZero();
    try {
      const started = Date.now();
      const outcome = await settledWithin(
        connectRedis({ kind: "cluster", nodes: [{ host: "127.0.0.1", port: base }] }, log, { ...timeouts, clusterReadyTimeoutMs: 1500 }),
        10_000,
      );
      expect(outcome).toBeInstanceOf(Error);
      expect((outcome as Error).message).toMatch(/^Cluster isn't ready/);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1400);
    } finally {
      await mendSlotZero();
      await untilEvery("ok");
    }
  }, 30_000);
});
