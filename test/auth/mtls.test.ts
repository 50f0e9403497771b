/**
 * TLS and mutual TLS (issue 6 "What it must show" 2): with client auth
 * required, a client without a certificate, or with one from another CA, is
 * refused; a good one passes, and its common name maps to scopes. Certificates
 * are made with openssl in a temp folder for each run; no key is committed.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let dir: string;
const file = (name: string) => join(dir, name);
const read = (name: string) => readFileSync(file(name));

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
}

/** A CA: a self-signed EC key and certificate. */
function makeCa(name: string): void {
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", `${name}.key`, "-out", `${name}.crt`, "-days", "1", "-subj", `/CN=${name}`);
}

/** A certificate for `cn` signed by `ca`, with the given X.509 extensions. */
function makeCert(name: string, cn: string, ca: string, extensions: string): void {
  writeFileSync(file(`${name}.ext`), extensions);
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`, "-CAcreateserial",
    "-out", `${name}.crt`, "-days", "1", "-extfile", `${name}.ext`);
}

const CLIENT_EXT = "extendedKeyUsage=clientAuth\n";

let redis: TestRedis;
const opsToken = randomBytes(24).toString("base64url");
const clients: SwitchyardClient[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-tls-"));
  makeCa("ca");
  makeCa("other-ca");
  makeCert("server", "localhost", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  makeCert("worker-1", "worker-1", "ca", CLIENT_EXT);
  makeCert("worker-2", "worker-2", "ca", CLIENT_EXT);
  makeCert("intruder", "worker-1", "other-ca", CLIENT_EXT);
  redis = await startRedis();
});
afterAll(async () => {
  for (const c of clients) c.close();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function client(sy: TestSwitchyard, credentials: grpc.ChannelCredentials, token?: string): SwitchyardClient {
  const c = new SwitchyardClient(sy.address, { credentials, token, timeoutMs: 10_000 });
  clients.push(c);
  return c;
}

/** TLS with a client certificate (`cert` unset: none), trusting our CA. */
const tls = (cert?: string) => (cert ? grpc.credentials.createSsl(read("ca.crt"), read(`${cert}.key`), read(`${cert}.crt`)) : grpc.credentials.createSsl(read("ca.crt")));

const failure = (p: Promise<unknown>) => p.then(() => ({ code: grpc.status.OK, details: "" }), (e: grpc.ServiceError) => ({ code: e.code, details: e.details }));

describe("mutual TLS (SWITCHYARD_TLS_CLIENT_AUTH=require)", () => {
  let sy: TestSwitchyard;
  beforeAll(async () => {
    sy = await startSwitchyard(redis, {
      env: {
        SWITCHYARD_TLS_CERT: file("server.crt"),
        SWITCHYARD_TLS_KEY: file("server.key"),
        SWITCHYARD_TLS_CA: file("ca.crt"),
        SWITCHYARD_TLS_CLIENT_AUTH: "require",
        SWITCHYARD_TLS_CLIENT_SCOPES: JSON.stringify([{ cn: "worker-1", scopes: ["queue:admin", "sys:audit:list"] }]),
        SWITCHYARD_AUTH_TOKENS: JSON.stringify([{ name: "ops", sha256: tokenHash(opsToken), scopes: ["*"] }]),
      },
    });
  });
  afterAll(async () => {
    await sy?.stop();
  });

  it("refuses a client without a certificate, and the call does nothing", async () => {
    const r = await failure(client(sy, tls()).createQueue({ name: "no-cert", mode: QueueMode.SIMPLE }));
    expect(r.code, r.details).toBe(grpc.status.UNAVAILABLE);
    expect(await redis.plain.hexists("{switchyard}:queues", "no-cert")).toBe(0);
  });

  it("refuses a client whose certificate comes from another CA, even with the right common name", async () => {
    const r = await failure(client(sy, tls("intruder")).createQueue({ name: "intruder", mode: QueueMode.SIMPLE }));
    expect(r.code, r.details).toBe(grpc.status.UNAVAILABLE);
    expect(await redis.plain.hexists("{switchyard}:queues", "intruder")).toBe(0);
  });

  it("refuses plaintext", async () => {
    const r = await failure(client(sy, grpc.credentials.createInsecure(), opsToken).listQueues());
    expect(r.code, r.details).toBe(grpc.status.UNAVAILABLE);
  });

  it("lets a good certificate through, with the scopes its common name maps to, and audits it by subject", async () => {
    const good = client(sy, tls("worker-1"));
    const queue = await good.createQueue({ name: "by-cert", mode: QueueMode.SIMPLE });
    expect(queue.name).toBe("by-cert");
    const denied = await failure(good.enqueue("by-cert", ["x"]));
    expect(denied.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(denied.details).toContain('caller "CN=worker-1"');
    const [entry] = (await good.listAuditLogs(1)).logs;
    expect([entry.actor, entry.method, entry.target, entry.code]).toEqual(["CN=worker-1", "switchyard.v1.QueueService/CreateQueue", "by-cert", 0]);
  });

  it("the web API on the side port reaches the TLS-only server over its private socket, and still needs a token", async () => {
    const url = `http://${sy.app.httpAddress}/api/switchyard.v1.AuthService/GetCaller`;
    const call = (headers: Record<string, string>) =>
      fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: "{}" }).then(async (r) => [r.status, await r.json()]);
    expect(await call({})).toEqual([401, { code: "unauthenticated", message: expect.stringContaining("authorization") }]);
    expect(await call({ authorization: `Bearer ${opsToken}` })).toEqual([200, { name: "ops", scopes: ["*"], authEnabled: true }]);
  });

  it("a good certificate whose name maps to nothing is UNAUTHENTICATED, unless it also sends a known token", async () => {
    const r = await failure(client(sy, tls("worker-2")).listQueues());
    expect(r.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(r.details).toContain("CN=worker-2 is not mapped to scopes");
    const withToken = client(sy, tls("worker-2"), opsToken);
    expect((await withToken.listQueues()).queues.map((q) => q.name)).toContain("by-cert");
  });
});

describe("TLS without client certificates", () => {
  it("serves TLS clients and refuses plaintext ones", async () => {
    const sy = await startSwitchyard(redis, { env: { SWITCHYARD_TLS_CERT: file("server.crt"), SWITCHYARD_TLS_KEY: file("server.key") } });
    try {
      expect((await client(sy, tls()).listQueues()).queues).toBeDefined();
      expect((await failure(client(sy, grpc.credentials.createInsecure()).listQueues())).code).toBe(grpc.status.UNAVAILABLE);
    } finally {
      await sy.stop();
    }
  });
});
