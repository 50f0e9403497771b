/**
 * The container's HEALTHCHECK (scripts/health-probe.mjs): with no arguments it finds the gRPC
 * server where SWITCHYARD_GRPC_ADDRESS says it listens, a unix socket or a wildcard host included.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard } from "../helpers/switchyard.js";

const probe = (env: Record<string, string>): Promise<{ code: number; stderr: string }> =>
  new Promise((resolve) => {
    const { SWITCHYARD_GRPC_ADDRESS: _, ...rest } = process.env;
    execFile(process.execPath, ["scripts/health-probe.mjs"], { env: { ...rest, ...env } }, (err, _stdout, stderr) =>
      resolve({ code: err ? Number(err.code) : 0, stderr }),
    );
  });

let redis: TestRedis;
let dir: string;
beforeAll(async () => {
  redis = await startRedis();
  dir = mkdtempSync(join(tmpdir(), "sy-probe-"));
});
afterAll(async () => {
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
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
});
