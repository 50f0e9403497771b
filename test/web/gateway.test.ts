/**
 * The web API (src/web/gateway.ts): the Connect and gRPC-web protocols for the
 * same services on the side HTTP port, called with generated clients (as the
 * dashboard does) and with plain fetch. Same tokens, scopes, statuses and
 * audit log as gRPC: real Redis, a real instance, real HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { fromBinary } from "@bufbuild/protobuf";
import { tokenHash } from "../../src/auth/authenticator.js";
import { ErrorInfoSchema } from "../../src/gen/google/rpc/error_details_pb.js";
import { QueueMode, QueueService } from "../../src/gen/switchyard/v1/queue_pb.js";
import { AuthService } from "../../src/gen/switchyard/v1/auth_pb.js";
import { AuditService } from "../../src/gen/switchyard/v1/audit_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { send } from "../helpers/http.js";

const adminToken = randomBytes(18).toString("base64url");
const viewerToken = randomBytes(18).toString("base64url");
let redis: TestRedis;
let sy: TestSwitchyard;
let base: string;
let grpcAdmin: SwitchyardClient;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis, {
    token: adminToken,
    env: {
      SWITCHYARD_AUTH_TOKENS: JSON.stringify([
        { name: "admin", sha256: tokenHash(adminToken), scopes: ["*"] },
        { name: "viewer", sha256: tokenHash(viewerToken), scopes: ["queue:read", "sys:job:list"] },
      ]),
    },
  });
  base = `http://${sy.app.httpAddress}/api`;
  grpcAdmin = sy.client;
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});

const bearer = (token: string): Interceptor => (next) => (req) => {
  req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};
const connect = (token?: string, binary = true): Transport =>
  createConnectTransport({ baseUrl: base, httpVersion: "1.1", useBinaryFormat: binary, interceptors: token ? [bearer(token)] : [] });

/** A unary call with fetch: Connect's JSON form, as a browser without generated code would send it. */
async function post(method: string, body: unknown, token?: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function connectError(call: Promise<unknown>): Promise<ConnectError> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("the call succeeded");
}

describe("the web API", () => {
  it("serves QueueService over Connect (binary) with generated clients: the same queue gRPC sees", async () => {
    const queues = createClient(QueueService, connect(adminToken));
    await queues.createQueue({ queue: { name: "{web}", mode: QueueMode.RELIABLE } });
    const { ids } = await queues.enqueue({ queue: "{web}", items: [{ payload: new TextEncoder().encode("one") }, { payload: new Uint8Array([0, 255]) }] });
    expect(ids).toHaveLength(2);
    expect((await queues.getQueueStats({ name: "{web}" })).stats).toMatchObject({ queue: "{web}", ready: 2n });
    const peeked = await grpcAdmin.peekQueue("{web}");
    expect(peeked.items.map((i) => [i.id, Buffer.from(i.payload).toString("hex")])).toEqual([
      [ids[0], Buffer.from("one").toString("hex")],
      [ids[1], "00ff"],
    ]);
  });

  it("serves Connect JSON to plain fetch, and gRPC-web", async () => {
    const stats = await post("switchyard.v1.QueueService/GetQueueStats", { name: "{web}" }, viewerToken);
    expect(stats).toMatchObject({ status: 200, json: { stats: { queue: "{web}", ready: "2" } } });
    const caller = await createClient(AuthService, createGrpcWebTransport({ baseUrl: base, httpVersion: "1.1", interceptors: [bearer(viewerToken)] })).getCaller({});
    expect([caller.name, caller.scopes, caller.authEnabled]).toEqual(["viewer", ["queue:read", "sys:job:list"], true]);
  });

  it("needs a token: none or an unknown one is 401 unauthenticated, and the call never reaches a handler", async () => {
    expect(await post("switchyard.v1.QueueService/ListQueues", {})).toMatchObject({ status: 401, json: { code: "unauthenticated" } });
    expect(await post("switchyard.v1.QueueService/PurgeQueue", { name: "{web}" }, "not-a-token")).toEqual({
      status: 401,
      json: { code: "unauthenticated", message: "unknown bearer token" },
    });
    expect(await redis.plain.llen("{web}")).toBe(2);
  });

  it("checks the token before reading the body: a request announcing 60 MB without a known token is refused at once", async () => {
    const path = "/api/switchyard.v1.QueueService/Enqueue";
    const headers = { "content-type": "application/json", "content-length": String(60_000_000) };
    // 64 KB of the 60 MB sent: the answer comes without the rest.
    expect(await send(sy.app.httpAddress, { method: "POST", path, headers, send: 65_536 })).toEqual({
      status: 401,
      body: JSON.stringify({ code: "unauthenticated", message: 'missing credentials: send metadata "authorization: Bearer <token>"' }),
    });
    const unknown = await send(sy.app.httpAddress, { method: "POST", path, headers: { ...headers, authorization: "Bearer nope" }, send: 65_536 });
    expect(unknown).toMatchObject({ status: 401, body: expect.stringContaining("unknown bearer token") });
  });

  it("reads at most SWITCHYARD_HTTP_MAX_BODY_BYTES (4 MiB) of a body, announced or not", async () => {
    const path = "/api/switchyard.v1.QueueService/Enqueue";
    const auth = { "content-type": "application/json", authorization: `Bearer ${adminToken}` };
    const announced = await send(sy.app.httpAddress, { method: "POST", path, headers: { ...auth, "content-length": String(5 * 1024 * 1024) }, send: 65_536 });
    expect(announced.status).toBe(413);
    expect(JSON.parse(announced.body)).toEqual({
      code: "resource_exhausted",
      message: "a request body of 5242880 bytes; the web API reads at most 4194304 (SWITCHYARD_HTTP_MAX_BODY_BYTES)",
    });
    // Chunked, with no length: cut off once 4 MiB have been read.
    const chunked = await fetch(`${base}/switchyard.v1.QueueService/Enqueue`, {
      method: "POST",
      headers: auth,
      body: new ReadableStream({
        start(controller) {
          for (let i = 0; i < 5; i++) controller.enqueue(new Uint8Array(1024 * 1024).fill(0x20));
          controller.close();
        },
      }),
      duplex: "half",
    } as RequestInit);
    expect(chunked.ok).toBe(false);
    expect(((await chunked.json()) as { code: string }).code).toBe("resource_exhausted");
  });

  it("refuses a read-only token's writes with the gRPC API's status and message, and changes nothing", async () => {
    const viewer = createClient(QueueService, connect(viewerToken));
    const err = await connectError(viewer.purgeQueue({ name: "{web}" }));
    expect(err.code).toBe(Code.PermissionDenied);
    expect(err.rawMessage).toBe(
      'PurgeQueue on queue "{web}" needs scope queue:admin:{web} (or a pattern that matches "{web}"); caller "viewer" does not have it',
    );
    const grpcViewer = new SwitchyardClient(sy.address, { token: viewerToken });
    const viaGrpc = await grpcViewer.purgeQueue("{web}").catch((e: { details: string }) => e.details);
    grpcViewer.close();
    expect(viaGrpc).toBe(err.rawMessage);
    expect(await redis.plain.llen("{web}")).toBe(2);
  });

  it("reports domain errors with their code, message and ErrorInfo: NOT_FOUND is 404, bad input 400", async () => {
    const missing = await post("switchyard.v1.QueueService/GetQueueStats", { name: "{nope}" }, adminToken);
    expect(missing).toEqual({
      status: 404,
      json: {
        code: "not_found",
        message: 'queue "{nope}" is not declared; declare it with CreateQueue or in the config file',
        details: [{ type: "google.rpc.ErrorInfo", value: expect.any(String) }],
      },
    });
    const [info] = (missing.json as { details: { value: string }[] }).details;
    const infoBytes = Buffer.from(info.value, "base64");
    expect(fromBinary(ErrorInfoSchema, infoBytes)).toMatchObject({ reason: "QUEUE_NOT_FOUND", domain: "switchyard.v1", metadata: { queue: "{nope}" } });
    const bad = await post("switchyard.v1.CronService/PreviewSchedule", { schedule: "61 * * * * *" }, adminToken);
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ code: "invalid_argument", message: expect.stringContaining('invalid cron expression: "61 * * * * *"') });
    const malformed = await fetch(`${base}/switchyard.v1.QueueService/GetQueueStats`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${adminToken}` },
      body: "{not json",
    });
    expect(malformed.status).toBe(400);
    expect(sy.app.httpAddress).toBeTruthy(); // the instance is still up
    expect((await grpcAdmin.getQueueStats("{web}")).ready).toBe(2n);
  });

  it("audits mutating calls made through it under the token's name", async () => {
    const queues = createClient(QueueService, connect(adminToken, false));
    expect((await queues.purgeQueue({ name: "{web}" })).purged).toBe(2n);
    const audit = createClient(AuditService, connect(adminToken));
    const [entry] = (await audit.listAuditLogs({ pageSize: 1 })).logs;
    expect([entry.actor, entry.method, entry.target, entry.code]).toEqual(["admin", "switchyard.v1.QueueService/PurgeQueue", "{web}", 0]);
  });

  it("serves no streaming method: Lease is for gRPC clients", async () => {
    const res = await fetch(`${base}/switchyard.v1.QueueService/Lease`, {
      method: "POST",
      headers: { "content-type": "application/connect+json", authorization: `Bearer ${adminToken}` },
      body: "",
    });
    expect(res.ok).toBe(false);
    expect(await redis.plain.llen("{web}.processing")).toBe(0);
  });
});
