/** Configuration from the environment, the config file, and the embedded Redis. */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { loadConfig, parseDuration } from "../../src/config.js";
import { connectRedis } from "../../src/redis/connection.js";
import { createLogger } from "../../src/log.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard } from "../helpers/switchyard.js";

const quiet = createLogger("silent");
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "sy-config-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("loadConfig", () => {
  it("starts an embedded Redis when no Redis is configured, and connects to one that is", () => {
    expect(loadConfig({}).redis).toEqual({ kind: "embedded", dataDir: ".switchyard-data", binary: "redis-server" });
    expect(loadConfig({ SWITCHYARD_REDIS_URL: "redis://127.0.0.1:6380" }).redis).toEqual({ kind: "standalone", url: "redis://127.0.0.1:6380" });
    expect(loadConfig({ SWITCHYARD_REDIS_CLUSTER_NODES: "127.0.0.1:7000, 127.0.0.1:7001" }).redis).toEqual({
      kind: "cluster",
      nodes: [{ host: "127.0.0.1", port: 7000 }, { host: "127.0.0.1", port: 7001 }],
    });
  });

  it("reads durations and refuses values it cannot use, naming the variable", () => {
    expect(parseDuration("X", "15s")).toBe(15_000);
    expect(parseDuration("X", "250ms")).toBe(250);
    expect(parseDuration("X", "24h")).toBe(86_400_000);
    expect(loadConfig({ SWITCHYARD_HEARTBEAT_INTERVAL: "5s" }).heartbeatIntervalMs).toBe(5000);
    expect(() => loadConfig({ SWITCHYARD_HEARTBEAT_INTERVAL: "soon" })).toThrow(/SWITCHYARD_HEARTBEAT_INTERVAL="soon" is not a duration/);
    expect(() => loadConfig({ SWITCHYARD_MAX_PAYLOAD_BYTES: "-1" })).toThrow(/SWITCHYARD_MAX_PAYLOAD_BYTES/);
    expect(() => loadConfig({ SWITCHYARD_REDIS_URL: "redis://x", SWITCHYARD_REDIS_CLUSTER_NODES: "a:1" })).toThrow(/not both/);
  });

  it("reads the background threads' nice value, 19 unless set, from 0 to 19", () => {
    expect(loadConfig({}).backgroundNice).toBe(19);
    expect([" 0", "7", "19"].map((v) => loadConfig({ SWITCHYARD_BACKGROUND_NICE: v }).backgroundNice)).toEqual([0, 7, 19]);
    for (const v of ["20", "-3", "1e1", "low"]) {
      expect(() => loadConfig({ SWITCHYARD_BACKGROUND_NICE: v })).toThrow(`SWITCHYARD_BACKGROUND_NICE="${v}" must be a nice value from 0 (leave the threads alone) to 19`);
    }
  });
});

describe("listening addresses", () => {
  it("take host:port (and unix:PATH for gRPC), and refuse anything else naming the variable, before a bind", () => {
    expect(loadConfig({ SWITCHYARD_GRPC_ADDRESS: "0.0.0.0:50051", SWITCHYARD_HTTP_ADDRESS: "[::1]:0" })).toMatchObject({ grpcAddress: "0.0.0.0:50051", httpAddress: "[::1]:0" });
    expect(loadConfig({ SWITCHYARD_HTTP_ADDRESS: "off" }).httpAddress).toBe("");
    const good = ["localhost:0", "my-host.example:50051", "10.0.0.1:65535", "[::]:0", "[::ffff:127.0.0.1]:1", "[fe80::1%eth0]:0"];
    for (const address of good) expect(loadConfig({ SWITCHYARD_GRPC_ADDRESS: address }).grpcAddress).toBe(address);
    for (const unix of ["unix:/run/sy.sock", "unix:///run/sy.sock", "unix:sy.sock"]) expect(loadConfig({ SWITCHYARD_GRPC_ADDRESS: unix }).grpcAddress).toBe(unix);
    const bad = [
      "foo", ":50051", "127.0.0.1:65536", "127.0.0.1:99999", "::1:50051", "host:port", " 127.0.0.1:1", "unix:", "unix:///", "unix://host/sy.sock", "off",
      // hosts the resolver would read another way, or not at all
      "1.2.3:0", "0x10:0", "0:0", "999.999.999.999:0", "a@b:0", "a/b:0", "hôst:0", "[1.2.3.4]:0", "[]:0",
    ];
    for (const value of bad) {
      expect(() => loadConfig({ SWITCHYARD_GRPC_ADDRESS: value }), value).toThrow(`SWITCHYARD_GRPC_ADDRESS="${value}" must be host:port`);
    }
    for (const value of ["127.0.0.1:70000", "unix:/run/sy.sock", "localhost", "1.2.3:0"]) {
      expect(() => loadConfig({ SWITCHYARD_HTTP_ADDRESS: value }), value).toThrow(`SWITCHYARD_HTTP_ADDRESS="${value}" must be host:port`);
    }
    // A unix socket path is bound whole only up to 107 bytes; a long value is shown cut short.
    const long = `unix:/${"d".repeat(101)}.sock`;
    expect(loadConfig({ SWITCHYARD_GRPC_ADDRESS: long }).grpcAddress).toBe(long);
    expect(() => loadConfig({ SWITCHYARD_GRPC_ADDRESS: `unix:/${"d".repeat(102)}.sock` })).toThrow(/socket path of 108 bytes; a unix socket path may have at most 107/);
    expect(() => loadConfig({ SWITCHYARD_GRPC_ADDRESS: "x".repeat(5000) })).toThrow(`SWITCHYARD_GRPC_ADDRESS="${"x".repeat(120)}…" must be`);
  });

  it("serve gRPC on a unix socket, and name it as the address", async () => {
    const redis = await startStandaloneRedis();
    const socket = join(dir, "grpc.sock");
    const sy = await startSwitchyard(redis, { env: { SWITCHYARD_GRPC_ADDRESS: `unix:${socket}`, SWITCHYARD_HTTP_ADDRESS: "off" } });
    try {
      expect(sy.address).toBe(`unix:${socket}`);
      expect(existsSync(socket)).toBe(true);
      await sy.client.createQueue({ name: "{unix}", mode: QueueMode.RELIABLE });
      expect(await sy.client.enqueue("{unix}", ["hi"])).toHaveLength(1);
      expect(await redis.plain.lrange("{unix}", 0, -1)).toHaveLength(1);
      expect((await sy.client.getQueueStats("{unix}")).ready).toBe(1n);
    } finally {
      await sy.stop();
      await redis.stop();
    }
    expect(existsSync(socket)).toBe(false);
  });

  it("take over a socket a killed instance left, and refuse a bind that cannot be made in one line naming the variable", async () => {
    const redis = await startStandaloneRedis();
    const start = (env: Record<string, string>) => startSwitchyard(redis, { env: { SWITCHYARD_HTTP_ADDRESS: "off", ...env } });
    const held: Server[] = [];
    try {
      // A socket file no one answers on: what a process killed while listening leaves.
      const stale = join(dir, "stale.sock");
      spawnSync(process.execPath, ["-e", `require("net").createServer().listen(${JSON.stringify(stale)}, () => process.kill(process.pid, "SIGKILL"))`]);
      expect(existsSync(stale)).toBe(true);
      const sy = await start({ SWITCHYARD_GRPC_ADDRESS: `unix:${stale}` });
      await sy.client.createQueue({ name: "{stale}", mode: QueueMode.RELIABLE });
      await sy.stop();

      // A socket another process listens on is left to it.
      const busy = join(dir, "busy.sock");
      held.push(await listening(createServer(), busy));
      await expect(start({ SWITCHYARD_GRPC_ADDRESS: `unix:${busy}` })).rejects.toThrow(`SWITCHYARD_GRPC_ADDRESS="unix:${busy}" names ${busy}, where another process listens already`);
      expect(existsSync(busy)).toBe(true);

      const file = join(dir, "regular.file");
      writeFileSync(file, "not a socket");
      await expect(start({ SWITCHYARD_GRPC_ADDRESS: `unix:${file}` })).rejects.toThrow(`names ${file}, which exists and is not a socket`);
      await expect(start({ SWITCHYARD_GRPC_ADDRESS: `unix:${join(dir, "missing", "s.sock")}` })).rejects.toThrow(`names a socket in ${join(dir, "missing")}, which does not exist`);

      // A TCP port in use, for gRPC and for the side HTTP port.
      const tcp = await listening(createServer(), 0, "127.0.0.1");
      held.push(tcp);
      const port = (tcp.address() as AddressInfo).port;
      await expect(start({ SWITCHYARD_GRPC_ADDRESS: `127.0.0.1:${port}` })).rejects.toThrow(
        new RegExp(`^SWITCHYARD_GRPC_ADDRESS="127.0.0.1:${port}" could not be listened on: listen EADDRINUSE`),
      );
      await expect(start({ SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: `127.0.0.1:${port}` })).rejects.toThrow(
        new RegExp(`^SWITCHYARD_HTTP_ADDRESS="127.0.0.1:${port}" could not be listened on: listen EADDRINUSE`),
      );
    } finally {
      for (const server of held) server.close();
      await redis.stop();
    }
  });
});

function listening(server: Server, ...at: [string] | [number, string]): Promise<Server> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(...(at as [number, string]), () => resolve(server));
  });
}

describe("hardening settings (issue 17)", () => {
  it("have documented defaults, and refuse values that would turn a bound off", () => {
    const c = loadConfig({});
    expect([c.redisCommandTimeoutMs, c.redisKeepAliveMs, c.maxItemBytes, c.maxPendingEnqueueBytes]).toEqual([5000, 10_000, 1024 * 1024 + 65_536, 128 * 1024 * 1024]);
    expect([c.maxStreamBufferBytes, c.maxBufferedBytes, c.leaseOpenTimeoutMs, c.maxStreamsPerConnection]).toEqual([16 * 1024 * 1024, 256 * 1024 * 1024, 10_000, 1000]);
    expect([c.connectionIdleTimeoutMs, c.maxHealthWatches, c.httpHosts, c.maxHttpBodyBytes]).toEqual([300_000, 1000, [], 4 * 1024 * 1024]);
    expect(loadConfig({ SWITCHYARD_MAX_PAYLOAD_BYTES: "100" }).maxItemBytes).toBe(100 + 65_536);
    expect(loadConfig({ SWITCHYARD_REDIS_COMMAND_TIMEOUT: "2s", SWITCHYARD_HTTP_HOSTS: "a.example, B.example." })).toMatchObject({
      redisCommandTimeoutMs: 2000,
      httpHosts: ["a.example", "b.example"],
    });
    expect(() => loadConfig({ SWITCHYARD_REDIS_COMMAND_TIMEOUT: "0s" })).toThrow(/SWITCHYARD_REDIS_COMMAND_TIMEOUT must be more than 0/);
    expect(() => loadConfig({ SWITCHYARD_MAX_ITEM_BYTES: "10", SWITCHYARD_MAX_PAYLOAD_BYTES: "100" })).toThrow(/is below SWITCHYARD_MAX_PAYLOAD_BYTES=100/);
  });
});

describe("embedded Redis", () => {
  it("runs redis-server on a unix socket with its data in an append-only file in the data folder", async () => {
    const dataDir = join(dir, "data");
    const conn = await connectRedis({ kind: "embedded", dataDir, binary: "redis-server" }, quiet);
    await conn.client.set("k", "v");
    const info = await conn.client.config("GET", "appendonly");
    expect(info).toEqual(["appendonly", "yes"]);
    expect(await conn.client.config("GET", "port")).toEqual(["port", "0"]);
    await conn.close();
    expect(existsSync(join(dataDir, "appendonlydir"))).toBe(true);

    const again = await connectRedis({ kind: "embedded", dataDir, binary: "redis-server" }, quiet);
    expect(await again.client.get("k")).toBe("v"); // kept on disk across restarts
    await again.close();
  });

  it("says how to install redis-server or point at a Redis when the binary is missing", async () => {
    await expect(
      connectRedis({ kind: "embedded", dataDir: join(dir, "missing"), binary: "no-such-redis-server" }, quiet),
    ).rejects.toThrow(/apt-get install -y redis-server.*SWITCHYARD_REDIS_URL/s);
  });
});

describe("config file", () => {
  let redis: StandaloneRedis;
  beforeAll(async () => {
    redis = await startStandaloneRedis();
  });
  afterAll(async () => redis.stop());

  it("declares the file's queues at start-up", async () => {
    const file = join(dir, "switchyard.json");
    writeFileSync(
      file,
      JSON.stringify({
        queues: [
          { name: "cache.warmups", mode: "QUEUE_MODE_SIMPLE" },
          { name: "{thumbnails}", mode: "QUEUE_MODE_RELIABLE", recoverySet: "{thumbnails}.claims", minIdle: "60s" },
        ],
      }),
    );
    const sy = await startSwitchyard(redis, { config: { configFile: file } });
    const { queues } = await sy.client.listQueues();
    expect(queues.map((q) => [q.name, q.mode])).toEqual([
      ["cache.warmups", QueueMode.SIMPLE],
      ["{thumbnails}", QueueMode.RELIABLE],
    ]);
    expect(queues[1].minIdle?.seconds).toBe(60n);
    await sy.stop();
  });

  it("refuses to start with a bad declaration, naming the file and entry", async () => {
    const file = join(dir, "bad.json");
    writeFileSync(file, JSON.stringify({ queues: [{ name: "jobs", mode: "QUEUE_MODE_RELIABLE" }] }));
    await expect(startSwitchyard(redis, { config: { configFile: file } })).rejects.toThrow(/use \{jobs\} and \{jobs\}\.processing/);
    writeFileSync(file, JSON.stringify({ queues: [{ name: "x", mood: "happy" }] }));
    await expect(startSwitchyard(redis, { config: { configFile: file } })).rejects.toThrow(/bad\.json: queues\[0\]/);
    const plain = new Redis({ path: redis.socketPath });
    expect(await plain.hexists("{switchyard}:queues", "jobs")).toBe(0);
    plain.disconnect();
  });
});
