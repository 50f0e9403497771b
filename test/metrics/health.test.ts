/**
 * /healthz and /readyz on the side port: readiness follows Redis and the
 * shutdown; liveness only the process. Each test has its own standalone Redis,
 * which one of them kills.
 */
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { get } from "../helpers/http.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { HealthProbe, ServingStatus } from "../helpers/health.js";

let redis: StandaloneRedis | undefined;
let sy: TestSwitchyard | undefined;
let restarted: EmbeddedRedis | undefined;

afterEach(async () => {
  await sy?.stop();
  await restarted?.stop();
  await redis?.stop();
  sy = redis = restarted = undefined;
});

describe("health endpoints", () => {
  it("/readyz fails while Redis is down and recovers with it; /healthz stays up", async () => {
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis);
    const http = sy.app.httpAddress;
    expect(await get(http, "/healthz")).toMatchObject({ status: 200, body: "ok\n" });
    expect(await get(http, "/readyz")).toMatchObject({ status: 200, body: "ready\n" });

    redis.plain.on("error", () => undefined); // the test's own client reconnects by itself
    await redis.server.kill();
    await expect.poll(async () => (await get(http, "/readyz")).status, { timeout: 10_000 }).toBe(503);
    expect((await get(http, "/readyz")).body).toMatch(/^not ready: redis/);
    expect((await get(http, "/healthz")).status).toBe(200); // a Redis outage is no reason to restart
    const metrics = await get(http, "/metrics");
    expect(metrics.status).toBe(200);
    expect(metrics.body).toMatch(/^switchyard_redis_up 0$/m);

    restarted = await startEmbeddedRedis({ dir: redis.server.dir, appendOnly: false }); // the same socket
    await expect.poll(async () => (await get(http, "/readyz")).status, { timeout: 15_000 }).toBe(200);
  });

  it("gRPC health and /readyz answer from one check: both go down while Redis hangs (CLIENT PAUSE) and come back with it", async () => {
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis);
    const http = sy.app.httpAddress;
    const probe = new HealthProbe(sy.address);
    const watched: ServingStatus[] = [];
    const unwatch = probe.watch((status) => watched.push(status));
    try {
      expect(await probe.check()).toBe(ServingStatus.SERVING);
      expect((await get(http, "/readyz")).status).toBe(200);

      // The connection stays up; Redis answers nothing for 3 s.
      await redis.plain.call("CLIENT", "PAUSE", "3000", "ALL");
      await expect.poll(async () => (await get(http, "/readyz")).status, { timeout: 3000 }).toBe(503);
      expect(await probe.check()).toBe(ServingStatus.NOT_SERVING); // the same check, no poll
      expect((await get(http, "/readyz")).body).toMatch(/^not ready: redis did not answer PING within 1000 ms/);

      await expect.poll(async () => (await get(http, "/readyz")).status, { timeout: 10_000 }).toBe(200);
      expect(await probe.check()).toBe(ServingStatus.SERVING);
      await expect.poll(() => watched).toEqual([ServingStatus.SERVING, ServingStatus.NOT_SERVING, ServingStatus.SERVING]);
    } finally {
      unwatch();
      probe.close();
    }
  });

  it("/readyz fails as soon as shutdown begins; both endpoints go away once it ends", async () => {
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis, { config: { shutdownGraceMs: 10_000 } });
    const http = sy.app.httpAddress;
    await sy.client.createQueue({ name: "{h}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{h}", ["held"]);
    const lease = sy.client.lease("{h}", 1);
    const [held] = await lease.take(1);

    // The held item keeps the drain waiting (up to the grace) while we look.
    const stopped = sy.app.stop();
    await expect.poll(async () => (await get(http, "/readyz")).body).toBe("not ready: shutting down\n");
    expect((await get(http, "/readyz")).status).toBe(503);
    expect((await get(http, "/healthz")).status).toBe(200);

    await sy.client.ack(held.leaseToken);
    await stopped;
    await expect(get(http, "/healthz")).rejects.toThrow();
    await lease.close();
  });

  it("answers only GET and HEAD", async () => {
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis);
    const res = await fetch(`http://${sy.app.httpAddress}/metrics`, { method: "POST" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
  });
});

describe("SWITCHYARD_HTTP_ADDRESS", () => {
  it("defaults to 127.0.0.1:9090, takes host:port or off, and refuses anything else", () => {
    expect(loadConfig({}).httpAddress).toBe("127.0.0.1:9090");
    expect(loadConfig({ SWITCHYARD_HTTP_ADDRESS: "0.0.0.0:0" }).httpAddress).toBe("0.0.0.0:0");
    expect(loadConfig({ SWITCHYARD_HTTP_ADDRESS: "[::1]:9100" }).httpAddress).toBe("[::1]:9100");
    expect(loadConfig({ SWITCHYARD_HTTP_ADDRESS: "off" }).httpAddress).toBe("");
    expect(() => loadConfig({ SWITCHYARD_HTTP_ADDRESS: "9090" })).toThrow(/SWITCHYARD_HTTP_ADDRESS="9090" must be host:port/);
  });

  it("off: no side port at all", async () => {
    redis = await startStandaloneRedis();
    sy = await startSwitchyard(redis, { env: { SWITCHYARD_HTTP_ADDRESS: "off" } });
    expect(sy.app.httpAddress).toBe("");
  });

  it("SWITCHYARD_OTEL takes on or off", () => {
    expect(loadConfig({}).otel).toBe(false);
    expect(loadConfig({ SWITCHYARD_OTEL: "on" }).otel).toBe(true);
    expect(() => loadConfig({ SWITCHYARD_OTEL: "yes" })).toThrow(/SWITCHYARD_OTEL="yes" must be on or off/);
  });
});
