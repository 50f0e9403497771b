/**
 * The container's HEALTHCHECK (scripts/health-probe.mjs): with no arguments it finds the gRPC
 * server where SWITCHYARD_GRPC_ADDRESS says it listens, a unix socket or a wildcard host included;
 * with TLS on that port it asks /readyz on SWITCHYARD_HTTP_ADDRESS instead.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { certificates, SERVER_EXT, type Certs } from "../helpers/certs.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard } from "../helpers/switchyard.js";

const probe = (env: Record<string, string>): Promise<{ code: number; stderr: string }> =>
  new Promise((resolve) => {
    const { SWITCHYARD_GRPC_ADDRESS: _, SWITCHYARD_HTTP_ADDRESS: __, SWITCHYARD_TLS_CERT: ___, ...rest } = process.env;
    execFile(process.execPath, ["scripts/health-probe.mjs"], { env: { ...rest, ...env } }, (err, _stdout, stderr) =>
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
    const tls = { SWITCHYARD_TLS_CERT: certs.file("server.crt"), SWITCHYARD_TLS_KEY: certs.file("server.key") };
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
});
