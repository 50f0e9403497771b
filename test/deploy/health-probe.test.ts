/**
 * The container's HEALTHCHECK (scripts/health-probe.mjs): with no arguments it finds the gRPC
 * server where SWITCHYARD_GRPC_ADDRESS says it listens, a unix socket or a wildcard host included;
 * with TLS on that port it asks /readyz on SWITCHYARD_HTTP_ADDRESS instead.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { certificates, SERVER_EXT, type Certs } from "../helpers/certs.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard } from "../helpers/switchyard.js";

/** A name other than localhost that /etc/hosts gives 127.0.0.1 (the machine's own name, often), if any: no resolver is asked. */
const loopbackAlias = readFileSync("/etc/hosts", "utf8")
  .split("\n")
  .map((line) => line.replace(/#.*/, "").trim().split(/\s+/))
  .find(([ip, ...names]) => ip === "127.0.0.1" && names.some((n) => n !== "localhost"))
  ?.find((n, i) => i > 0 && n !== "localhost");

/** TLS on the gRPC port, with the certificate the tests make. */
const tlsEnv = () => ({ SWITCHYARD_TLS_CERT: certs.file("server.crt"), SWITCHYARD_TLS_KEY: certs.file("server.key") });

const probe = (env: Record<string, string>, args: string[] = []): Promise<{ code: number; stderr: string }> =>
  new Promise((resolve) => {
    const { SWITCHYARD_GRPC_ADDRESS: _, SWITCHYARD_HTTP_ADDRESS: __, SWITCHYARD_TLS_CERT: ___, ...rest } = process.env;
    execFile(process.execPath, ["scripts/health-probe.mjs", ...args], { env: { ...rest, ...env } }, (err, _stdout, stderr) =>
      resolve({ code: err ? Number(err.code) : 0, stderr }),
    );
  });

let redis: TestRedis;
let dir: string;
let certs: Certs;
beforeAll(async () => {
  redis = await startRedis();
  dir = mkdtempSync(join(tmpdir(), "sy-probe-"));
  certs = certificates();
  certs.makeCa("ca");
  certs.makeCert("server", "localhost", "ca", SERVER_EXT);
});
afterAll(async () => {
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
  certs.cleanup();
});

describe("health probe", () => {
  it("checks the unix socket SWITCHYARD_GRPC_ADDRESS names", async () => {
    const address = `unix:${join(dir, "grpc.sock")}`;
    const sy = await startSwitchyard(redis, { clock: "redis", env: { SWITCHYARD_GRPC_ADDRESS: address, SWITCHYARD_HTTP_ADDRESS: "off" } });
    try {
      expect(await probe({ SWITCHYARD_GRPC_ADDRESS: address })).toEqual({ code: 0, stderr: "" });
    } finally {
      await sy.stop();
    }
    const gone = await probe({ SWITCHYARD_GRPC_ADDRESS: address });
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain(`health probe ${address}:`);
  });

  it("checks a wildcard host:port on loopback, and a named host as it is", async () => {
    const sy = await startSwitchyard(redis, { clock: "redis", env: { SWITCHYARD_GRPC_ADDRESS: "0.0.0.0:0", SWITCHYARD_HTTP_ADDRESS: "off" } });
    try {
      const port = sy.address.slice(sy.address.lastIndexOf(":") + 1);
      expect(await probe({ SWITCHYARD_GRPC_ADDRESS: `0.0.0.0:${port}` })).toEqual({ code: 0, stderr: "" });
      expect(await probe({ SWITCHYARD_GRPC_ADDRESS: `127.0.0.1:${port}` })).toEqual({ code: 0, stderr: "" });
    } finally {
      await sy.stop();
    }
  });

  it("asks /readyz on the side HTTP port when the gRPC port has TLS, and says so when that port is off", async () => {
    const tls = tlsEnv();
    const sy = await startSwitchyard(redis, { clock: "redis", env: { ...tls, SWITCHYARD_HTTP_ADDRESS: "0.0.0.0:0" } });
    const http = sy.app.httpAddress;
    const port = http.slice(http.lastIndexOf(":") + 1);
    const env = { ...tls, SWITCHYARD_GRPC_ADDRESS: sy.address, SWITCHYARD_HTTP_ADDRESS: `0.0.0.0:${port}` };
    try {
      // A plaintext Check against the TLS port fails: the probe must not be making one.
      expect((await probe({ SWITCHYARD_GRPC_ADDRESS: sy.address })).code).toBe(1);
      expect(await probe(env)).toEqual({ code: 0, stderr: "" });
    } finally {
      await sy.stop();
    }
    const gone = await probe(env);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain(`health probe http://127.0.0.1:${port}/readyz:`);

    const off = await probe({ ...env, SWITCHYARD_HTTP_ADDRESS: "off" });
    expect(off.code).toBe(1);
    expect(off.stderr).toContain("SWITCHYARD_HTTP_ADDRESS is off: set it");
  });

  it.skipIf(!loopbackAlias)("asks /readyz as localhost, so a named host the side port does not list (SWITCHYARD_HTTP_HOSTS) is no 403", async () => {
    const tls = tlsEnv();
    const sy = await startSwitchyard(redis, { clock: "redis", env: { ...tls, SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0" } });
    try {
      const port = sy.app.httpAddress.slice(sy.app.httpAddress.lastIndexOf(":") + 1);
      const named = `http://${loopbackAlias}:${port}/readyz`;
      expect((await fetch(named)).status).toBe(403); // the guard: a name it does not list
      expect(await probe({ ...tls, SWITCHYARD_GRPC_ADDRESS: sy.address, SWITCHYARD_HTTP_ADDRESS: `${loopbackAlias}:${port}` })).toEqual({ code: 0, stderr: "" });
    } finally {
      await sy.stop();
    }
  });

  it("gives up after 3 s on a side port that answers a byte at a time, well inside Docker's 5 s", async () => {
    // A hostile or wedged peer: a status line, then one header byte every 100 ms, forever.
    const timers: NodeJS.Timeout[] = [];
    const trickle = createServer((socket) => {
      socket.on("error", () => undefined);
      socket.write("HTTP/1.1 200 OK\r\n");
      timers.push(setInterval(() => socket.write("X"), 100));
    });
    await new Promise<void>((ok) => trickle.listen(0, "127.0.0.1", ok));
    const { port } = trickle.address() as { port: number };
    try {
      const started = Date.now();
      const r = await probe({ ...tlsEnv(), SWITCHYARD_HTTP_ADDRESS: `127.0.0.1:${port}` });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`health probe http://127.0.0.1:${port}/readyz: no answer in 3000 ms`);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      timers.forEach(clearInterval);
      trickle.close();
    }
  });

  it("refuses an address or a service name when the gRPC port has TLS, saying why", async () => {
    const env = tlsEnv();
    for (const args of [["127.0.0.1:1"], ["", "switchyard.v1.QueueService"]]) {
      const r = await probe(env, args);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain("give no address or service name");
    }
  });
});
