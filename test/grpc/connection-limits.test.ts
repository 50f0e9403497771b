/**
 * What a client can hold on the gRPC port (issue 17): a Lease stream that
 * never opens is ended, connections advertise a bounded number of concurrent
 * streams, idle connections are closed, and Health Watch calls (open to
 * anyone) are capped.
 */
import { connect } from "node:http2";
import { createConnection } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ManualClock } from "../../src/clock.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { useSwitchyard } from "../helpers/switchyard.js";
import { rawLease } from "../helpers/raw-lease.js";
import { scrape } from "../helpers/http.js";
import { HealthProbe, ServingStatus } from "../helpers/health.js";

const t = useSwitchyard({
  config: { leaseOpenTimeoutMs: 10_000, maxStreamsPerConnection: 100, connectionIdleTimeoutMs: 500, maxHealthWatches: 3 },
});

describe("a Lease stream that never sends open", () => {
  it("is ended with INVALID_ARGUMENT after SWITCHYARD_LEASE_OPEN_TIMEOUT", async () => {
    const { sy } = t;
    const started = async () => (await scrape(sy.app.httpAddress)).get('grpc_server_started_total{grpc_method="Lease",grpc_service="switchyard.v1.QueueService",grpc_type="bidi_stream"}') ?? 0;
    const before = await started();
    const silent = rawLease(sy.address, { read: true });
    try {
      await expect.poll(started).toBe(before + 1); // the server holds the call
      await (sy.clock as ManualClock).advance(9_999);
      expect(silent.status()).toBeUndefined();
      await (sy.clock as ManualClock).advance(1);
      await expect.poll(() => silent.status()).toBe("3");
    } finally {
      silent.close();
    }
  });
});

describe("connections", () => {
  it("advertise SWITCHYARD_MAX_STREAMS_PER_CONNECTION concurrent streams, not 2^32-1", async () => {
    const session = connect(`http://${t.sy.address}`);
    try {
      const settings = await new Promise<{ maxConcurrentStreams?: number }>((ok) => session.once("remoteSettings", ok));
      expect(settings.maxConcurrentStreams).toBe(100);
    } finally {
      session.destroy();
    }
  });

  it("are closed after SWITCHYARD_CONNECTION_IDLE_TIMEOUT with no call open; one with a Lease stream open stays", async () => {
    const { sy } = t;
    await sy.client.createQueue({ name: "{idle-conn}", mode: QueueMode.RELIABLE });
    const worker = new SwitchyardClient(sy.address);
    const lease = worker.lease("{idle-conn}", 1);
    await lease.opened;
    // Opened after the worker's connection went quiet: if a quiet connection with a stream were closed, the worker's would go first.
    const idle = connect(`http://${sy.address}`);
    idle.on("error", () => undefined);
    let closed = false;
    idle.on("close", () => (closed = true));
    try {
      await expect.poll(() => closed, { timeout: 5000 }).toBe(true);
      let ended = false;
      void lease.ended.then(() => (ended = true));
      await sy.client.enqueue("{idle-conn}", ["still served"]);
      expect((await lease.take(1))[0].payload).toEqual(Buffer.from("still served"));
      expect(ended).toBe(false);
    } finally {
      idle.destroy();
      await lease.close();
      worker.close();
    }
  });

  it("are closed after SWITCHYARD_CONNECTION_IDLE_TIMEOUT when they never start HTTP/2 (a TCP connection that sends nothing)", async () => {
    const [host, port] = t.sy.address.split(":");
    const silent = createConnection({ host, port: Number(port) });
    silent.on("error", () => undefined);
    let closed = false;
    silent.on("close", () => (closed = true));
    silent.resume(); // read, so the server's FIN is seen
    try {
      await expect.poll(() => closed, { timeout: 5000 }).toBe(true);
    } finally {
      silent.destroy();
    }
  });
});

describe("health Watch", () => {
  it("takes at most SWITCHYARD_MAX_HEALTH_WATCHES calls at once: more are RESOURCE_EXHAUSTED, Check still answers", async () => {
    const probes = Array.from({ length: 4 }, () => new HealthProbe(t.sy.address));
    const statuses: ServingStatus[][] = probes.map(() => []);
    const failures: number[] = [];
    const stops = probes.map((p, i) => p.watch((s) => statuses[i].push(s), (err) => failures.push(err.code)));
    try {
      await expect.poll(() => statuses.filter((s) => s.length > 0).length + failures.length).toBe(4);
      expect(failures).toEqual([8]); // RESOURCE_EXHAUSTED
      expect(statuses.filter((s) => s[0] === ServingStatus.SERVING)).toHaveLength(3);
      expect(await probes[3].check()).toBe(ServingStatus.SERVING);
    } finally {
      stops.forEach((stop) => stop());
      probes.forEach((p) => p.close());
    }
  });
});
