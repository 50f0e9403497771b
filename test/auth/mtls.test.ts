/**
 * TLS and mutual TLS (issue 6 "What it must show" 2): with client auth
 * required, a client without a certificate, or with one from another CA, is
 * refused; a good one passes, and its common name maps to scopes. Certificates
 * are made with openssl in a temp folder for each run; no key is committed.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { certificates, CLIENT_EXT, SERVER_EXT, type Certs } from "../helpers/certs.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let certs: Certs;
const file = (name: string) => certs.file(name);
const read = (name: string) => certs.read(name);

let redis: TestRedis;
const opsToken = randomBytes(24).toString("base64url");
const clients: SwitchyardClient[] = [];

beforeAll(async () => {
  certs = certificates();
  certs.makeCa("ca");
  certs.makeCa("other-ca");
  certs.makeCert("server", "localhost", "ca", SERVER_EXT);
  certs.makeCert("worker-1", "worker-1", "ca", CLIENT_EXT);
  certs.makeCert("worker-2", "worker-2", "ca", CLIENT_EXT);
  certs.makeCert("intruder", "worker-1", "other-ca", CLIENT_EXT);
  redis = await startRedis();
});
afterAll(async () => {
  for (const c of clients) c.close();
  await redis?.stop();
  certs?.cleanup();
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
