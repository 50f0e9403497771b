/**
 * Producers and lease streams through a real HTTP/2 proxy: Debian's nginx with
 * grpc_pass, its idle and stream timeouts (2 s) shorter than the work (3 s).
 * Heartbeats keep quiet streams open (and without them nginx cuts them); a
 * reload, a restart of the proxy and the server's maximum connection age cut
 * the streams, the clients reconnect on their own, and no item is lost.
 * deploy/envoy.yaml and deploy/istio.yaml name the nginx settings they mirror.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { runWorker } from "../../src/client/worker.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { freeBasePort } from "../helpers/cluster.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const NGINX = "/usr/sbin/nginx";
/** nginx's idle and stream timeouts; the server's heartbeat is well under, the work well over. */
const PROXY_TIMEOUT_S = 2;
const WORK_MS = 3000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let dir: string;
let redis: TestRedis;
/** Heartbeats every 500 ms. */
let steady: TestSwitchyard;
/** Heartbeats every 500 ms, and closes each connection after 3 s (1 s grace): GOAWAY. */
let aging: TestSwitchyard;
/** Heartbeats only every 10 s: longer than the proxy waits. */
let quiet: TestSwitchyard;
let base: number;
let nginx: ChildProcess | undefined;
const clients: SwitchyardClient[] = [];

const through = (n: number) => `127.0.0.1:${base + n}`;

function nginxConfig(): string {
  const server = (n: number, upstream: string) => `  server {
    listen ${through(n)} http2;
    location / { grpc_pass grpc://${upstream}; }
  }`;
  return `daemon off;
worker_processes 1;
# A reload's old worker closes its connections after this (Envoy: --drain-time-s; Istio: terminationDrainDuration).
worker_shutdown_timeout 1s;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log notice;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  # No frame from the server for this long cuts the stream (Envoy: stream_idle_timeout and the
  # route's idle_timeout; Istio: the EnvoyFilter's stream_idle_timeout).
  grpc_read_timeout ${PROXY_TIMEOUT_S}s;
  grpc_send_timeout ${PROXY_TIMEOUT_S}s;
  client_body_timeout ${PROXY_TIMEOUT_S}s;
  # A connection without streams for this long is closed (Envoy: common_http_protocol_options.idle_timeout;
  # Istio: the DestinationRule's connectionPool.http.idleTimeout).
  keepalive_timeout ${PROXY_TIMEOUT_S}s;
${server(0, steady.address)}
${server(1, aging.address)}
${server(2, quiet.address)}
}
`;
}

async function startNginx(): Promise<void> {
  const child = spawn(NGINX, ["-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf")], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  nginx = child;
  // Listening once its pid file names the master.
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
    try {
      if (Number(readFileSync(join(dir, "nginx.pid"), "utf8")) === child.pid) return;
    } catch {
      // not written yet
    }
    await sleep(25);
  }
  throw new Error(`nginx did not start: ${stderr}`);
}

async function stopNginx(): Promise<void> {
  const child = nginx;
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((ok) => child.once("exit", ok));
  child.kill("SIGTERM");
  await exited;
  rmSync(join(dir, "nginx.pid"), { force: true });
}

function client(address: string): SwitchyardClient {
  const c = new SwitchyardClient(address, { timeoutMs: 5000 });
  clients.push(c);
  return c;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-proxy-"));
  redis = await startRedis();
  // The production clock: heartbeats are timers on it, and the proxy waits in real time.
  const env = { SWITCHYARD_HEARTBEAT_INTERVAL: "500ms" };
  steady = await startSwitchyard(redis, { clock: "redis", env });
  aging = await startSwitchyard(redis, { clock: "redis", env: { ...env, SWITCHYARD_MAX_CONNECTION_AGE: "3s", SWITCHYARD_MAX_CONNECTION_AGE_GRACE: "1s" } });
  quiet = await startSwitchyard(redis, { clock: "redis", env: { SWITCHYARD_HEARTBEAT_INTERVAL: "10s" } });
  base = await freeBasePort(3);
  writeFileSync(join(dir, "nginx.conf"), nginxConfig());
  await startNginx();
  await steady.client.createQueue({ name: "{idle}", mode: QueueMode.RELIABLE });
  await steady.client.createQueue({ name: "{quiet}", mode: QueueMode.RELIABLE });
  await steady.client.createQueue({ name: "{busy}", mode: QueueMode.RELIABLE, recoverySet: "{busy}.claims", minIdle: { seconds: 60n } });
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await stopNginx();
  await Promise.all([steady?.stop(), aging?.stop(), quiet?.stop()]);
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("through nginx (grpc_pass) with 2 s idle and stream timeouts", () => {
  it("keeps an idle lease stream open with heartbeats, and cuts one whose heartbeats are too rare", async () => {
    const kept = client(through(0)).lease("{idle}", 1);
    const cut = client(through(2)).lease("{quiet}", 1);
    await Promise.all([kept.opened, cut.opened]);
    await sleep(PROXY_TIMEOUT_S * 1000 + 1500);
    // nginx resets the quiet one (RST_STREAM: INTERNAL on the client).
    const ended = await Promise.race([cut.ended, sleep(1000).then(() => "still open")]);
    expect(ended).toMatchObject({ code: grpc.status.INTERNAL });
    expect(kept.heartbeatCount).toBeGreaterThanOrEqual(5);
    await steady.client.enqueue("{idle}", ["after a quiet while"]);
    const [d] = await kept.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("after a quiet while");
    kept.ack(d.leaseToken);
    expect(await kept.close()).toBeUndefined();
  }, 20_000);

  it("loses nothing while the proxy reloads and restarts and the server ages connections out", async () => {
    const producer = client(through(1));
    const handled = new Map<string, number>();
    const streamEnds: string[] = [];
    const worker = runWorker({
      client: client(through(1)),
      queue: "{busy}",
      concurrency: 8,
      handler: async (d) => {
        if (Buffer.from(d.payload).toString().startsWith("slow")) await sleep(WORK_MS);
        handled.set(d.id, (handled.get(d.id) ?? 0) + 1);
      },
      onError: (err, d) => {
        if (!d) streamEnds.push(grpc.status[(err as grpc.ServiceError).code] ?? String(err));
      },
    });
    const produced: string[] = [];
    let refused = 0;
    let producing = true;
    const production = (async () => {
      for (let n = 0; producing; n++) {
        const items = n % 10 === 0 ? ["slow " + n] : Array.from({ length: 5 }, (_, i) => `item ${n}.${i}`);
        await producer.enqueue("{busy}", items).then((ids) => produced.push(...ids), () => refused++);
        await sleep(50);
      }
    })();
    try {
      await sleep(1500);
      process.kill(nginx!.pid!, "SIGHUP"); // reload: the old worker closes its streams after 1 s
      await sleep(2500);
      await stopNginx(); // restart: every stream through it ends at once
      await sleep(300);
      await startNginx();
      const afterRestart = produced.length;
      await sleep(4000); // meanwhile the server's 3 s connection age cuts streams too
      producing = false;
      await production;
      // The producer found its way back through the new proxy on its own.
      expect(produced.length - afterRestart).toBeGreaterThan(20);
      const deadline = Date.now() + 40_000;
      const missing = () => produced.filter((id) => !handled.has(id));
      // Wait for ready too: an item a handler finished after its stream was cut went back to the queue
      // (its ack had no stream to go on), and the new stream takes it once a slot is free.
      const unsettled = async () => (({ ready, processing }) => Number(ready) + Number(processing))(await steady.client.getQueueStats("{busy}"));
      while ((missing().length > 0 || (await unsettled()) > 0) && Date.now() < deadline) await sleep(100);
      const stats = await steady.client.getQueueStats("{busy}");
      expect({ missing: missing().length, ready: stats.ready, processing: stats.processing }).toEqual({ missing: 0, ready: 0n, processing: 0n });
    } finally {
      await worker.stop();
    }
    // The reload, the restart and the connection age each ended the worker's stream at least once.
    expect(streamEnds.length, JSON.stringify(streamEnds)).toBeGreaterThanOrEqual(3);
    expect(produced.length).toBeGreaterThan(200);
    console.log(
      `through nginx: ${produced.length} items enqueued (${refused} enqueues refused during the cuts), all handled ` +
        `(${[...handled.values()].filter((n) => n > 1).length} twice); the worker's stream ended ${streamEnds.length} times (${[...new Set(streamEnds)].join(", ")})`,
    );
  }, 90_000);
});
