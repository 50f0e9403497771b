/**
 * The server runs as the deployment files configure it (the image's ENV, then
 * the manifest's) with the whole filesystem read-only but for the container's
 * writable volumes: the working tree, /tmp and everything else refuse writes,
 * and TMPDIR (and, for the embedded Redis, the data folder) are empty writable
 * folders. It must start, serve a lease, its dashboard and its API, stop
 * cleanly, and leave TMPDIR as it found it. Each run is a private mount
 * namespace (`unshare --mount`, which CI's root may make).
 */
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenHash } from "../../src/auth/authenticator.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { freeBasePort } from "../helpers/cluster.js";
import { compose, imageEnv, kubernetes, type Container } from "./manifests.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/**
 * Makes every mount read-only but `writable` (each first bound onto itself, so it is a
 * mount of its own), checks that the working tree refuses a write, then runs the server.
 */
const SCRIPT = `set -e
for w in $WRITABLE; do mount --bind "$w" "$w"; done
awk '{print $2}' /proc/self/mounts | sort -u | while read -r m; do
  case " /proc /sys /dev $WRITABLE " in *" $m "*) continue;; esac
  case "$m" in /proc/*|/sys/*|/dev/*) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
if touch "$PWD/.read-only-probe" 2>/dev/null; then echo "the working tree is still writable" >&2; exit 97; fi
exec "$NODE" dist/main.js`;

let dir: string;
let redis: EmbeddedRedis;
let redisUrl: string;

beforeAll(async () => {
  try {
    execFileSync("unshare", ["--mount", "--propagation", "private", "--", "true"], { stdio: "pipe" });
  } catch (err) {
    throw new Error(`this test needs a private mount namespace (unshare --mount: run as root, as CI does): ${(err as { stderr?: Buffer }).stderr?.toString() ?? String(err)}`);
  }
  dir = mkdtempSync(join(tmpdir(), "sy-readonly-"));
  // TCP, so nothing of the test's own Redis is a file the server must reach.
  const port = await freeBasePort(1);
  redis = await startEmbeddedRedis({ dir: join(dir, "redis"), port, appendOnly: false });
  redisUrl = `redis://127.0.0.1:${port}`;
});
afterAll(async () => {
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A fresh folder for a volume. */
function folder(name: string): string {
  return mkdtempSync(join(dir, `${name}-`));
}

/** The container's environment for this host: each mounted container path replaced by the host folder standing for it. */
function hostEnv(c: Container, volumes: Record<string, string>, overrides: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(c.env)) {
    const mount = Object.keys(volumes).find((p) => v === p || v.startsWith(`${p}/`));
    env[k] = mount ? volumes[mount] + v.slice(mount.length) : v;
  }
  return { ...env, ...overrides, SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0" };
}

interface Run {
  code: number | null;
  stderr: string;
  grpc?: string;
  http?: string;
  /** Stops the server with SIGTERM; resolves to its exit code. */
  stop(): Promise<number | null>;
}

/** Starts the server read-only but for `writable`; resolves once it listens, or once it exited. */
function runReadOnly(env: Record<string, string>, writable: string[]): Promise<Run> {
  const child = spawn("unshare", ["--mount", "--propagation", "private", "--", "sh", "-c", SCRIPT], {
    cwd: root,
    env: { PATH: process.env.PATH, HOME: "/nonexistent", ...env, WRITABLE: writable.join(" "), NODE: process.execPath },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<number | null>((ok) => child.on("close", (code) => ok(code)));
  const run: Run = { code: null, stderr: "", stop: () => (child.kill("SIGTERM"), exited) };
  child.stderr.on("data", (c: Buffer) => (run.stderr += c.toString()));
  return new Promise((ok) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    createInterface({ input: child.stdout }).on("line", (line) => {
      const grpc = /^switchyard listening on (\S+)$/.exec(line);
      const http = /^switchyard dashboard on http:\/\/([^/]+)\//.exec(line);
      if (grpc) run.grpc = grpc[1];
      if (http) {
        run.http = http[1];
        clearTimeout(timer);
        ok(run);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      run.code = code;
      ok(run);
    });
  });
}

/** Enqueues, leases and acks an item, and reads the queue's stats through the dashboard's API. */
async function serves(run: Run, token: string | undefined, queue: string, group?: string): Promise<void> {
  expect(run.code, run.stderr).toBe(null);
  const client = new SwitchyardClient(run.grpc!, { token, timeoutMs: 5000 });
  try {
    await client.enqueue(queue, ["read-only"]);
    const lease = client.lease(queue, 1, { group });
    const [d] = await lease.take(1);
    lease.ack(d.leaseToken);
    await lease.close();
  } finally {
    client.close();
  }
  const page = await fetch(`http://${run.http}/dashboard/`, { signal: AbortSignal.timeout(5000) });
  expect(page.status).toBe(200);
  const api = await fetch(`http://${run.http}/api/switchyard.v1.QueueService/GetQueueStats`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ name: queue }),
    signal: AbortSignal.timeout(5000),
  });
  expect(await api.json()).toMatchObject({ stats: { queue } });
}

/** Runs, serves, stops with SIGTERM (exit 0), and leaves TMPDIR (`tmp`) empty again. */
async function runAndStop(env: Record<string, string>, writable: string[], token: string | undefined, queue: string, tmp: string, group?: string): Promise<void> {
  const run = await runReadOnly(env, writable);
  try {
    await serves(run, token, queue, group);
    // The dashboard gateway's socket folder: in TMPDIR, and nowhere else.
    expect(readdirSync(tmp)).toEqual([expect.stringMatching(/^switchyard-/)]);
  } finally {
    expect(await run.stop(), run.stderr).toBe(0);
  }
  expect(readdirSync(tmp)).toEqual([]);
}

describe("read-only start", () => {
  it("runs as deploy/kubernetes.yaml configures it (TMPDIR an emptyDir, tokens from the Secret)", async () => {
    const k8s = kubernetes();
    const token = randomBytes(24).toString("base64url");
    const config = folder("configmap");
    const auth = folder("secret");
    const tmp = folder("emptydir");
    writeFileSync(join(config, "switchyard.json"), k8s.configMap["switchyard.json"]);
    writeFileSync(join(auth, "tokens.json"), JSON.stringify([{ name: "ops", sha256: tokenHash(token), scopes: ["*"] }]));
    const volumes: Record<string, string> = {};
    for (const m of k8s.container.mounts) volumes[m.path] = m.kind === "configMap" ? config : m.kind === "secret" ? auth : tmp;
    const env = hostEnv(k8s.container, volumes, { SWITCHYARD_REDIS_URL: redisUrl, SWITCHYARD_INSTANCE_ID: "switchyard-0" });
    expect(env.TMPDIR).toBe(tmp);
    expect(env.SWITCHYARD_AUTH).toBe("on");
    await runAndStop(env, [tmp], token, "{thumbnails}", tmp);
  }, 60_000);

  it("runs as docker-compose.yml configures it (a tmpfs at /tmp, its secret file, its queue file)", async () => {
    const c = compose();
    const tmp = folder("tmpfs");
    const volumes: Record<string, string> = {};
    for (const m of c.container.mounts) volumes[m.path] = m.writable ? tmp : m.hostPath!;
    const env = hostEnv(c.container, volumes, { SWITCHYARD_REDIS_URL: redisUrl });
    // The example file's uploads is a STREAM queue (seed 000's image service), read as its group thumbnailer.
    await runAndStop(env, [tmp], "switchyard-dev-token", "uploads", tmp, "thumbnailer");
  }, 60_000);

  it("runs the image's embedded Redis with its data in the /data volume", async () => {
    const data = folder("data");
    const tmp = folder("tmp");
    const env = hostEnv({ raw: {}, env: imageEnv(), mounts: [], readOnlyRootFilesystem: true }, { "/data": data, "/tmp": tmp }, {});
    expect(env.SWITCHYARD_DATA_DIR).toBe(data);
    const run = await runReadOnly(env, [data, tmp]);
    try {
      expect(run.code, run.stderr).toBe(null);
      const client = new SwitchyardClient(run.grpc!, { timeoutMs: 5000 });
      await client.createQueue({ name: "{embedded}", mode: 2 });
      client.close();
      await serves(run, undefined, "{embedded}");
    } finally {
      expect(await run.stop(), run.stderr).toBe(0);
    }
    expect(readdirSync(data)).toEqual(expect.arrayContaining(["appendonlydir", "redis.log"]));
    expect(readdirSync(tmp)).toEqual([]);
  }, 60_000);

  it("fails to start, saying why, when TMPDIR is not writable (so the runs above prove no other write)", async () => {
    const k8s = kubernetes();
    const token = randomBytes(24).toString("base64url");
    const auth = folder("secret");
    writeFileSync(join(auth, "tokens.json"), JSON.stringify([{ name: "ops", sha256: tokenHash(token), scopes: ["*"] }]));
    const env = hostEnv(k8s.container, { "/etc/switchyard-auth": auth }, { SWITCHYARD_REDIS_URL: redisUrl, SWITCHYARD_CONFIG_FILE: "" });
    const run = await runReadOnly(env, []);
    expect(run.code).not.toBe(0);
    expect(run.code).not.toBe(null);
    expect(run.stderr).toMatch(/EROFS: read-only file system, mkdtemp '\/tmp\/switchyard-/);
  }, 60_000);
});
