/**
 * A Redis that hangs (issue 17, Broken 2): the link to it blackholed by a
 * proxy this file starts, TCP open and no answers. Calls fail with UNAVAILABLE
 * within the command timeout instead of waiting for the client's deadline;
 * what waits in memory is bounded; a blocking read is not cut by the timeout;
 * every connection has TCP keepalive.
 */
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";
import { Code, statusOf } from "../helpers/grpc-status.js";

let redis: StandaloneRedis | undefined;
let proxy: TcpProxy | undefined;
let sy: TestSwitchyard | undefined;
let client: SwitchyardClient | undefined;

afterEach(async () => {
  client?.close();
  proxy?.restore();
  await sy?.stop();
  await proxy?.close();
  await redis?.stop();
  sy = redis = proxy = client = undefined;
});

/** An instance whose Redis is behind a proxy; a client with unary enqueues and a 10 s deadline. */
async function behindProxy(config: Parameters<typeof startSwitchyard>[1] = {}): Promise<TestSwitchyard> {
  redis = await startStandaloneRedis();
  proxy = await startProxy(`unix:${redis.socketPath}`);
  sy = await startSwitchyard(redis, { ...config, config: { redis: { kind: "standalone", url: `redis://${proxy.address}` }, ...config.config } });
  client = new SwitchyardClient(sy.address, { enqueueStream: false, coalesceEnqueues: false, timeoutMs: 10_000 });
  return sy;
}

describe("a blackholed Redis link", () => {
  it("fails calls with UNAVAILABLE within the command timeout, saying the outcome is unknown, and serves again once the link is back", async () => {
    await behindProxy({ config: { redisCommandTimeoutMs: 500 } });
    await client!.createQueue({ name: "{hung}", mode: QueueMode.RELIABLE });
    await client!.enqueue("{hung}", ["before"]);

    proxy!.blackhole();
    const [enqueue, stats] = await Promise.all([statusOf(client!.enqueue("{hung}", ["during"])), statusOf(client!.getQueueStats("{hung}"))]);
    expect(enqueue.code).toBe(Code.UNAVAILABLE);
    expect(enqueue.details).toMatch(/may or may not have taken effect/);
    expect(enqueue.ms).toBeLessThan(3000); // the timeout (500 ms) and a reconnect's ready check, not the 10 s deadline
    expect(stats.code).toBe(Code.UNAVAILABLE);
    expect(stats.ms).toBeLessThan(3000);

    proxy!.restore();
    await expect.poll(async () => (await statusOf(client!.enqueue("{hung}", ["after"]))).code, { timeout: 10_000 }).toBe(0);
  });

  it("holds at most SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES of items waiting for Redis: more is RESOURCE_EXHAUSTED at once", async () => {
    await behindProxy({ config: { redisCommandTimeoutMs: 1500, maxPendingEnqueueBytes: 1_000_000 } });
    await client!.createQueue({ name: "{full}", mode: QueueMode.RELIABLE });
    await client!.enqueue("{full}", ["before"]);

    proxy!.blackhole();
    const first = statusOf(client!.enqueue("{full}", [Buffer.alloc(600_000)]));
    // The first push is out (it waits on Redis); the second would pass the limit.
    await expect.poll(() => sy!.app.queues.pendingEnqueueBytes).toBeGreaterThan(600_000);
    const second = await statusOf(client!.enqueue("{full}", [Buffer.alloc(600_000)]));
    expect(second.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(second.details).toMatch(/wait for Redis on this instance.*SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES=1000000/);
    expect(second.ms).toBeLessThan(1000);
    // A small one still fits beside the first.
    const small = statusOf(client!.enqueue("{full}", ["small"]));
    expect((await first).code).toBe(Code.UNAVAILABLE);
    expect((await small).code).toBe(Code.UNAVAILABLE);
  });
});

describe("Redis connections", () => {
  it("a blocking wait for items outlasts the command timeout without being cut", async () => {
    const lines: string[] = [];
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis, {
      config: { redisCommandTimeoutMs: 200, blockTimeoutSec: 1 },
      log: createLogger("warn", (line) => void lines.push(line)),
    });
    await sy.client.createQueue({ name: "{idle}", mode: QueueMode.RELIABLE });
    const lease = sy.client.lease("{idle}", 5);
    await lease.opened;
    // Redis counts a BLMOVE once it has returned: two mean one blocked its whole second.
    const blmoves = async () => Number(/cmdstat_blmove:calls=(\d+)/.exec(await redis!.plain.info("commandstats"))?.[1] ?? 0);
    await expect.poll(blmoves, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    expect(lines.filter((l) => l.includes("lease pump failed"))).toEqual([]);
    await sy.client.enqueue("{idle}", ["wakes it"]);
    expect((await lease.take(1))[0].payload).toEqual(Buffer.from("wakes it"));
    await lease.close();
  });

  it("every connection to Redis has TCP keepalive: the command connection, the blocking reader and the subscriber", async () => {
    await behindProxy({ config: { redisKeepAliveMs: 30_000 } });
    await client!.createQueue({ name: "{ka}", mode: QueueMode.RELIABLE });
    const lease = client!.lease("{ka}", 1); // an idle stream: its queue's pump waits on a blocking connection
    await lease.opened;
    const port = Number(proxy!.address.split(":")[1]);
    // Sockets of this process (and only it) to the proxy. /proc/net/tcp's 6th column is "timer:expiry":
    // timer 02 is the keepalive timer, its expiry in hundredths of a second. ioredis alone sets keepalive
    // with the kernel's idle time (2 h); SWITCHYARD_REDIS_KEEPALIVE makes it 30 s here.
    const toProxy = () =>
      readFileSync("/proc/net/tcp", "utf8")
        .split("\n")
        .slice(1)
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f.length > 5 && f[3] === "01" && parseInt(f[2].split(":")[1], 16) === port);
    await expect.poll(() => toProxy().length, { timeout: 5000 }).toBeGreaterThanOrEqual(3);
    // A socket with bytes in flight shows its retransmit timer (01) instead, until they are acked:
    // read again until every socket is idle (a busy machine may catch one mid-command).
    let timers: string[] = [];
    await expect.poll(() => (timers = toProxy().map((f) => f[5])).some((t) => t.startsWith("01:")), { timeout: 5000 }).toBe(false);
    const keepalive = (t: string) => t.startsWith("02:") && parseInt(t.slice(3), 16) <= 30 * 100;
    expect(timers.every(keepalive), `timers ${timers.join(",")}`).toBe(true);
    await lease.close();
  });
});
