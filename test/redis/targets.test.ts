/**
 * Redis deployments beyond one open server, configured the way an operator does
 * (SWITCHYARD_* variables through loadConfig): Redis Sentinel with passwords,
 * through a failover; and a Redis Cluster that takes only TLS and a password.
 * Every server is a real redis-server on loopback.
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SwitchyardClient } from "../../src/client/client.js";
import { loadConfig } from "../../src/config.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { certificates, type Certs } from "../helpers/certs.js";
import { freeBasePort } from "../helpers/cluster.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const run = promisify(execFile);
const PASSWORD = "data-password";
const SENTINEL_PASSWORD = "sentinel-password";

let dir: string;
const servers: EmbeddedRedis[] = [];
const children: ChildProcess[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "sy-targets-"));
});
afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function redisServer(name: string, port: number, ...args: string[]): Promise<EmbeddedRedis> {
  const server = await startEmbeddedRedis({ dir: join(dir, name), port, appendOnly: false, extraArgs: args });
  servers.push(server);
  return server;
}

/** A Switchyard instance whose Redis is configured by the SWITCHYARD_REDIS_* variables in `env`. */
function switchyard(env: Record<string, string>): Promise<TestSwitchyard> {
  return startSwitchyard({ target: loadConfig(env).redis }, { env });
}

/** Polls `check` until it returns a value; fails after `ms`. */
async function until<T>(what: string, check: () => Promise<T | undefined>, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Leases `n` items of `queue` on one stream, acks them, and returns their payloads. */
async function leaseAndAck(client: SwitchyardClient, queue: string, n: number): Promise<string[]> {
  const lease = client.lease(queue, n);
  const got = await lease.take(n);
  for (const d of got) lease.ack(d.leaseToken);
  await lease.close();
  return got.map((d) => Buffer.from(d.payload).toString());
}

describe("Redis Sentinel (SWITCHYARD_REDIS_SENTINELS)", () => {
  let master: EmbeddedRedis;
  let ports: number;
  let sentinel: Redis;

  beforeAll(async () => {
    ports = await freeBasePort(3);
    const auth = ["--requirepass", PASSWORD, "--masterauth", PASSWORD];
    master = await redisServer("master", ports, ...auth);
    await redisServer("replica", ports + 1, ...auth, "--replicaof", "127.0.0.1", String(ports));
    const conf = join(dir, "sentinel.conf");
    writeFileSync(
      conf,
      [
        `port ${ports + 2}`,
        "bind 127.0.0.1",
        `dir ${dir}`,
        `requirepass ${SENTINEL_PASSWORD}`,
        `sentinel monitor data 127.0.0.1 ${ports} 1`,
        `sentinel auth-pass data ${PASSWORD}`,
        "sentinel down-after-milliseconds data 1000",
        "sentinel failover-timeout data 5000",
        "",
      ].join("\n"),
    );
    const child = spawn("redis-server", [conf, "--sentinel"], { stdio: "ignore" });
    children.push(child);
    sentinel = new Redis({ port: ports + 2, password: SENTINEL_PASSWORD, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => 50 }).on("error", () => undefined);
    await until("the sentinel to see the replica", async () => {
      await sentinel.connect().catch(() => undefined);
      const replicas = (await sentinel.call("SENTINEL", "REPLICAS", "data")) as unknown[];
      return replicas.length === 1 ? true : undefined;
    });
    // Listed is not in sync: the master holds a replica's first sync back for repl-diskless-sync-delay
    // (5 s), and the test's WAIT for the replica could run out before it is done.
    const replica = new Redis({ port: ports + 1, password: PASSWORD }).on("error", () => undefined);
    await until("the replica to be in sync", async () => (/^master_link_status:up\b/m.test(await replica.info("replication")) ? true : undefined));
    replica.disconnect();
  }, 30_000);
  afterAll(() => sentinel?.disconnect());

  it("finds the master through the sentinels, with both passwords, and follows a failover", async () => {
    const sy = await switchyard({
      SWITCHYARD_REDIS_SENTINELS: `127.0.0.1:${ports + 2}`,
      SWITCHYARD_REDIS_SENTINEL_MASTER: "data",
      SWITCHYARD_REDIS_SENTINEL_PASSWORD: SENTINEL_PASSWORD,
      SWITCHYARD_REDIS_PASSWORD: PASSWORD,
    });
    try {
      await sy.client.createQueue({ name: "{s}", mode: QueueMode.RELIABLE });
      await sy.client.enqueue("{s}", ["before 1", "before 2"]);
      expect(await leaseAndAck(sy.client, "{s}", 1)).toEqual(["before 1"]);
      const onMaster = new Redis({ port: ports, password: PASSWORD }).on("error", () => undefined);
      expect(await onMaster.lrange("{s}", 0, -1)).toHaveLength(1);
      // The replica has everything before the master dies (Redis replicates asynchronously).
      expect(await onMaster.wait(1, 5000)).toBe(1);
      onMaster.disconnect();

      // The master dies; the sentinel promotes the replica after down-after-milliseconds.
      await master.kill();
      await until("the replica to be master", async () => {
        const [, port] = (await sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "data")) as string[];
        return Number(port) === ports + 1 ? true : undefined;
      });
      // Enqueues fail (UNAVAILABLE) while no master answers, then land on the new one.
      await until("an enqueue after the failover", () => sy.client.enqueue("{s}", ["after"]));
      const onNewMaster = new Redis({ port: ports + 1, password: PASSWORD }).on("error", () => undefined);
      expect(await onNewMaster.lrange("{s}", 0, -1)).toHaveLength(2);
      onNewMaster.disconnect();
      expect(await leaseAndAck(sy.client, "{s}", 2)).toEqual(["before 2", "after"]);
      const stats = await sy.client.getQueueStats("{s}");
      expect({ ready: stats.ready, processing: stats.processing, completed: stats.completedTotal }).toEqual({ ready: 0n, processing: 0n, completed: 3n });
    } finally {
      await sy.stop();
    }
  }, 60_000);

  it("refuses a Sentinel setup without a master name", () => {
    expect(() => loadConfig({ SWITCHYARD_REDIS_SENTINELS: "127.0.0.1:26379" })).toThrow(
      "SWITCHYARD_REDIS_SENTINELS needs SWITCHYARD_REDIS_SENTINEL_MASTER: the master name the sentinels monitor",
    );
  });
});

describe("Redis Cluster with a password and TLS (SWITCHYARD_REDIS_PASSWORD, SWITCHYARD_REDIS_TLS_CA)", () => {
  let certs: Certs;
  let base: number;

  beforeAll(async () => {
    certs = certificates();
    certs.makeCa("ca");
    // Cluster nodes present it to each other too (the bus is TLS): it serves both ends.
    certs.makeCert("redis", "redis", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
    base = await freeBasePort(3);
    const tls = [
      "--tls-cert-file", certs.file("redis.crt"), "--tls-key-file", certs.file("redis.key"), "--tls-ca-cert-file", certs.file("ca.crt"),
      "--tls-auth-clients", "no", "--tls-cluster", "yes",
    ];
    for (let i = 0; i < 3; i++) {
      // TLS only: --port 0 closes the plaintext port (startEmbeddedRedis's --port is the TLS one here).
      await redisServer(`node-${i}`, 0, "--tls-port", String(base + i), ...tls, "--cluster-enabled", "yes",
        "--cluster-config-file", join(dir, `nodes-${i}.conf`), "--requirepass", PASSWORD, "--masterauth", PASSWORD);
    }
    await run("redis-cli", ["--tls", "--cacert", certs.file("ca.crt"), "-a", PASSWORD, "--no-auth-warning", "--cluster", "create",
      ...[0, 1, 2].map((i) => `127.0.0.1:${base + i}`), "--cluster-yes"], { timeout: 30_000 });
    // Every node, not only the seed: one that agreed later answers CLUSTERDOWN until it does.
    await until("every node to say the cluster is ok", async () => {
      for (let i = 0; i < 3; i++) {
        const { stdout } = await run("redis-cli", ["--tls", "--cacert", certs.file("ca.crt"), "-a", PASSWORD, "--no-auth-warning", "-p", String(base + i), "CLUSTER", "INFO"]);
        if (!/cluster_state:ok/.test(stdout) || !/cluster_slots_ok:16384/.test(stdout)) return undefined;
      }
      return true;
    });
  }, 60_000);
  afterAll(() => certs?.cleanup());

  it("connects from one seed with the password and the CA, and runs queues on every master", async () => {
    const sy = await switchyard({
      SWITCHYARD_REDIS_CLUSTER_NODES: `127.0.0.1:${base}`,
      SWITCHYARD_REDIS_PASSWORD: PASSWORD,
      SWITCHYARD_REDIS_TLS_CA: certs.file("ca.crt"),
    });
    try {
      expect(sy.app.redis.cluster).toBe(true);
      const queues = ["{a}", "{b}", "{c}", "{d}", "{e}"];
      for (const q of queues) {
        await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
        await sy.client.enqueue(q, [`to ${q}`]);
      }
      for (const q of queues) expect(await leaseAndAck(sy.client, q, 1)).toEqual([`to ${q}`]);
      const masters = (sy.app.redis.client as import("ioredis").Cluster).nodes("master");
      expect(masters).toHaveLength(3);
    } finally {
      await sy.stop();
    }
  }, 60_000);

  it("says what to set when the password or TLS settings are misplaced", () => {
    expect(() => loadConfig({ SWITCHYARD_REDIS_URL: "redis://127.0.0.1:6379", SWITCHYARD_REDIS_PASSWORD: "x" })).toThrow(
      /SWITCHYARD_REDIS_PASSWORD is for SWITCHYARD_REDIS_CLUSTER_NODES, SWITCHYARD_REDIS_SENTINELS or a rediss:\/\/ SWITCHYARD_REDIS_URL/,
    );
    expect(() => loadConfig({ SWITCHYARD_REDIS_CLUSTER_NODES: "127.0.0.1:7000", SWITCHYARD_REDIS_TLS: "yes" })).toThrow(
      'SWITCHYARD_REDIS_TLS="yes" must be on or off',
    );
    expect(loadConfig({ SWITCHYARD_REDIS_CLUSTER_NODES: "127.0.0.1:7000", SWITCHYARD_REDIS_TLS: "on" }).redis).toEqual({
      kind: "cluster",
      nodes: [{ host: "127.0.0.1", port: 7000 }],
      tls: {},
    });
  });
});
