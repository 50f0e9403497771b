/**
 * EnqueueStream (queue.proto): Enqueue requests as messages on one stream,
 * each answered by id with its ids or its own status; the stream ends with OK
 * once every request it read is answered. And the TS client's use of it
 * (src/client/enqueue-stream.ts). Real gRPC, real Redis.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  EnqueueResponseSchema,
  EnqueueStreamRequestSchema,
  type EnqueueStreamResponse,
  QueueList,
  QueueMode,
  QueueService,
} from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { serviceDefinition } from "../../src/grpc/adapter.js";
import type { EnqueueCall } from "../../src/grpc/enqueue-wire.js";
import { delta, scrape } from "../helpers/http.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const text = (b: Uint8Array) => Buffer.from(b).toString();
const PRODUCER = randomBytes(24).toString("base64url");
const ADMIN = randomBytes(24).toString("base64url");

let redis: TestRedis;
let sy: TestSwitchyard;
let admin: SwitchyardClient;
const closers: (() => void)[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const tokens = [
    { name: "admin", sha256: tokenHash(ADMIN), scopes: ["*"] },
    { name: "orders producer", sha256: tokenHash(PRODUCER), scopes: ["queue:enqueue:{orders}*"] },
  ];
  sy = await startSwitchyard(redis, {
    token: ADMIN,
    env: { SWITCHYARD_AUTH_TOKENS: JSON.stringify(tokens), SWITCHYARD_MAX_PAYLOAD_BYTES: "64" },
  });
  admin = sy.client;
  await admin.createQueue({ name: "{orders}", mode: QueueMode.RELIABLE });
  await admin.createQueue({ name: "{orders}.eu", mode: QueueMode.SIMPLE });
  await admin.createQueue({ name: "{mail}", mode: QueueMode.SIMPLE });
});
afterAll(async () => {
  for (const close of closers) close();
  await sy?.stop();
  await redis?.stop();
});

type Request = MessageInitShape<typeof EnqueueStreamRequestSchema>;

/** A raw EnqueueStream call: write requests, read responses, see how it ended. */
function openStream(token = ADMIN) {
  const client = new SwitchyardClient(sy.address, { token });
  closers.push(() => client.close());
  const call = (client.grpc as unknown as { enqueueStream(): grpc.ClientDuplexStream<unknown, EnqueueStreamResponse> }).enqueueStream();
  const responses: EnqueueStreamResponse[] = [];
  const waiters: (() => void)[] = [];
  call.on("data", (r: EnqueueStreamResponse) => {
    responses.push(r);
    waiters.splice(0).forEach((w) => w());
  });
  call.on("error", () => undefined);
  const status = new Promise<grpc.StatusObject>((ok) => call.on("status", ok));
  return {
    call,
    responses,
    status,
    send: (r: Request) => call.write(create(EnqueueStreamRequestSchema, r)),
    /** Resolves once `n` responses have arrived (or rejects if the stream ends first). */
    async received(n: number): Promise<EnqueueStreamResponse[]> {
      while (responses.length < n) {
        const ended = await Promise.race([new Promise<false>((ok) => waiters.push(() => ok(false))), status.then(() => true)]);
        if (ended && responses.length < n) throw new Error(`the stream ended after ${responses.length} of ${n} responses`);
      }
      return responses;
    },
  };
}

const byId = (rs: EnqueueStreamResponse[]) => new Map(rs.map((r) => [r.id, r]));
const item = (s: string) => ({ payload: Buffer.from(s) });

describe("EnqueueStream", () => {
  it("answers every request by its id with its ids, in the order each queue got them", async () => {
    const s = openStream();
    for (let id = 1; id <= 50; id++) {
      s.send({ id, request: { queue: id % 2 ? "{orders}" : "{mail}", items: [item(`n${id}`), item(`n${id}b`)] } });
    }
    const got = byId(await s.received(50));
    expect([...got.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    for (const r of got.values()) expect({ code: r.code, message: r.message, n: r.ids.length }).toEqual({ code: 0, message: "", n: 2 });
    // Each queue holds its items in the order the requests were sent (peek: next to leave first).
    const orders = await admin.peekQueue("{orders}", QueueList.READY, 100);
    const sentOdd = Array.from({ length: 25 }, (_, i) => 2 * i + 1).flatMap((id) => [`n${id}`, `n${id}b`]);
    expect(orders.items.map((i) => text(i.payload))).toEqual(sentOdd);
    expect(orders.items.map((i) => i.id)).toEqual(Array.from({ length: 25 }, (_, i) => got.get(2 * i + 1)!.ids).flat());
    s.call.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await admin.purgeQueue("{orders}");
    await admin.purgeQueue("{mail}");
  });

  it("answers a failed request with its own status and goes on", async () => {
    const s = openStream();
    s.send({ id: 7, request: { queue: "{nowhere}", items: [item("a")] } });
    s.send({ id: 8, request: { queue: "{mail}", items: [] } });
    s.send({ id: 9, request: { queue: "{mail}", items: [item("x".repeat(65))] } });
    s.send({ id: 10 });
    s.send({ id: 11, request: { queue: "{mail}", items: [item("fine")] } });
    const got = byId(await s.received(5));
    expect(got.get(7)).toMatchObject({ code: grpc.status.NOT_FOUND, ids: [] });
    expect(got.get(7)!.message).toContain("{nowhere}");
    expect(got.get(8)).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, message: "items must not be empty" });
    expect(got.get(9)).toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      message: "item 0 has a payload of 65 bytes; the limit is 64 (SWITCHYARD_MAX_PAYLOAD_BYTES)",
    });
    expect(got.get(10)).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, message: "request is required: the EnqueueRequest to run" });
    expect(got.get(11)).toMatchObject({ code: grpc.status.OK, message: "" });
    expect(got.get(11)!.ids).toHaveLength(1);
    const mail = await admin.peekQueue("{mail}", QueueList.READY, 10);
    expect(mail.items.map((i) => text(i.payload))).toEqual(["fine"]);
    s.call.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await admin.purgeQueue("{mail}");
  });

  it("answers a request its token may not send with PERMISSION_DENIED, and the stream goes on", async () => {
    const s = openStream(PRODUCER);
    s.send({ id: 1, request: { queue: "{mail}", items: [item("not mine")] } });
    s.send({ id: 2, request: { queue: "{orders}.eu", items: [item("mine")] } });
    const got = byId(await s.received(2));
    expect(got.get(1)).toMatchObject({
      code: grpc.status.PERMISSION_DENIED,
      message: 'EnqueueStream on queue "{mail}" needs scope queue:enqueue:{mail} (or a pattern that matches "{mail}"); caller "orders producer" does not have it',
    });
    expect(got.get(2)).toMatchObject({ code: grpc.status.OK });
    expect(await redis.plain.llen("{mail}")).toBe(0);
    expect(await redis.plain.llen("{orders}.eu")).toBe(1);
    s.call.end();
    expect((await s.status).code).toBe(grpc.status.OK);
    await admin.purgeQueue("{orders}.eu");
  });

  it("refuses a stream without a valid token, and ends a stream on a malformed message", async () => {
    const anonymous = openStream("not a token");
    anonymous.send({ id: 1, request: { queue: "{orders}", items: [item("a")] } });
    expect(await anonymous.status).toMatchObject({ code: grpc.status.UNAUTHENTICATED });

    const client = new SwitchyardClient(sy.address, { token: ADMIN });
    closers.push(() => client.close());
    const raw = client.grpc.makeBidiStreamRequest(
      `/${QueueService.typeName}/EnqueueStream`,
      (b: Buffer) => b,
      (b: Buffer) => b,
      new grpc.Metadata(),
    );
    raw.on("data", () => undefined);
    raw.on("error", () => undefined);
    const ended = new Promise<grpc.StatusObject>((ok) => raw.on("status", ok));
    raw.write(Buffer.from([0x12, 0x05, 0x0a])); // field 2 says 5 bytes follow; 1 does
    const st = await ended;
    expect(st.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(st.details).toMatch(/^malformed switchyard\.v1\.EnqueueStreamRequest: /);
    expect(await redis.plain.llen("{orders}")).toBe(0);
  });

  it("ends with OK after a half-close only once every request read is answered", async () => {
    const s = openStream();
    for (let id = 1; id <= 20; id++) s.send({ id, request: { queue: "{mail}", items: Array.from({ length: 50 }, (_, i) => item(`${id}.${i}`)) } });
    s.call.end();
    const st = await s.status;
    expect(st.code).toBe(grpc.status.OK);
    expect(s.responses).toHaveLength(20);
    expect(s.responses.every((r) => r.code === 0 && r.ids.length === 50)).toBe(true);
    expect(await redis.plain.llen("{mail}")).toBe(1000);
    await admin.purgeQueue("{mail}");
  });
});

describe("the TS client on EnqueueStream", () => {
  it("sends enqueue() calls as stream messages, not unary calls, each call with its own ids or error", async () => {
    const client = new SwitchyardClient(sy.address, { token: ADMIN });
    closers.push(() => client.close());
    const before = await scrape(sy.app.httpAddress);
    const ids = await client.enqueue("{orders}", ["one", "two"]);
    const more = await client.enqueue("{orders}", ["three"]);
    await expect(client.enqueue("{nowhere}", ["x"])).rejects.toMatchObject({ code: grpc.status.NOT_FOUND });
    const after = await scrape(sy.app.httpAddress);
    const labels = (method: string, type: string) => ({ grpc_service: "switchyard.v1.QueueService", grpc_method: method, grpc_type: type });
    expect(delta(before, after, "grpc_server_started_total", labels("EnqueueStream", "bidi_stream"))).toBe(1);
    expect(delta(before, after, "grpc_server_msg_received_total", labels("EnqueueStream", "bidi_stream"))).toBe(3);
    expect(delta(before, after, "grpc_server_started_total", labels("Enqueue", "unary"))).toBe(0);
    const peeked = await admin.peekQueue("{orders}", QueueList.READY, 10);
    expect(peeked.items.map((i) => [i.id, text(i.payload)])).toEqual([
      [ids[0], "one"],
      [ids[1], "two"],
      [more[0], "three"],
    ]);
    await admin.purgeQueue("{orders}");
  });

  it("answers what a draining server read, and sends again (here: UNAVAILABLE) what it never read", async () => {
    // A second instance on the same Redis, to stop.
    const env = { SWITCHYARD_AUTH_TOKENS: JSON.stringify([{ name: "admin", sha256: tokenHash(ADMIN), scopes: ["*"] }]) };
    const other = await startSwitchyard(redis, { token: ADMIN, env });
    const client = new SwitchyardClient(other.address, { token: ADMIN });
    // Connections whose push waits for the paused writes: the server has read the request.
    const waitingScripts = async () =>
      String(await redis.nodeFor("{orders}").call("CLIENT", "LIST"))
        .split("\n")
        .filter((line) => / flags=\S*b/.test(line) && / cmd=(?:lpush|eval|evalsha) /.test(line)).length;
    try {
      await client.enqueue("{orders}", ["before"]);
      // Redis holds writes: "read" is read by the server and waits for Redis.
      await redis.nodeFor("{orders}").call("CLIENT", "PAUSE", "5000", "WRITE");
      const read = client.enqueue("{orders}", ["read"]);
      for (let i = 0; i < 500 && (await waitingScripts()) === 0; i++) await new Promise((r) => setImmediate(r));
      expect(await waitingScripts()).toBe(1);
      const stopping = other.stop(); // the drain starts now: the stream reads nothing more
      const unread = client.enqueue("{orders}", ["unread"]);
      await redis.nodeFor("{orders}").call("CLIENT", "UNPAUSE");
      expect(await read).toHaveLength(1);
      // The stream ended with OK and "unread" unanswered: sent again, to an instance that takes no more.
      await expect(unread).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      await stopping;
      const payloads = (await admin.peekQueue("{orders}", QueueList.READY, 10)).items.map((i) => text(i.payload));
      expect(payloads).toEqual(["before", "read"]);
    } finally {
      client.close();
      await other.stop();
      await admin.purgeQueue("{orders}");
    }
  });

  it("falls back to unary Enqueue for good against a server without EnqueueStream", async () => {
    // An older server: QueueService with Enqueue only, handing each call on to the real instance.
    const upstream = new SwitchyardClient(sy.address, { token: ADMIN, enqueueStream: false });
    const old = new grpc.Server();
    let unaryCalls = 0;
    old.addService(serviceDefinition(QueueService), {
      enqueue: (call: grpc.ServerUnaryCall<EnqueueCall, unknown>, done: grpc.sendUnaryData<unknown>) => {
        unaryCalls++;
        const { queue, items } = call.request;
        upstream.enqueue(queue, Array.from({ length: items.count }, (_, i) => items.payload(i))).then(
          (ids) => done(null, create(EnqueueResponseSchema, { ids })),
          (err: grpc.ServiceError) => done(err),
        );
      },
    });
    const port = await new Promise<number>((ok, fail) => old.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (e, p) => (e ? fail(e) : ok(p))));
    const client = new SwitchyardClient(`127.0.0.1:${port}`);
    try {
      const first = await Promise.all([client.enqueue("{mail}", ["a"]), client.enqueue("{orders}", ["b"])]);
      const second = await client.enqueue("{mail}", ["c"]);
      expect(first.flat().concat(second)).toHaveLength(3);
      expect(unaryCalls).toBe(3);
      expect((await admin.peekQueue("{mail}", QueueList.READY, 10)).items.map((i) => text(i.payload))).toEqual(["a", "c"]);
    } finally {
      client.close();
      upstream.close();
      old.forceShutdown();
      await admin.purgeQueue("{mail}");
      await admin.purgeQueue("{orders}");
    }
  });

  it("fails a request with no answer in time with DEADLINE_EXCEEDED, and the stream serves the next", async () => {
    const client = new SwitchyardClient(sy.address, { token: ADMIN, timeoutMs: 300 });
    closers.push(() => client.close());
    expect(await client.enqueue("{orders}", ["first"])).toHaveLength(1);
    // Redis holds every write for 1 s: the server cannot answer within the client's 300 ms.
    await redis.nodeFor("{orders}").call("CLIENT", "PAUSE", "1000", "WRITE");
    const waiting = client.enqueue("{orders}", ["held"]);
    await expect(waiting).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED, details: "no answer to Enqueue within 300 ms" });
    await redis.nodeFor("{orders}").call("CLIENT", "UNPAUSE");
    // The same stream goes on; the late request was written after all, as a unary call past its deadline may be.
    expect(await client.enqueue("{orders}", ["next"])).toHaveLength(1);
    const payloads = (await admin.peekQueue("{orders}", QueueList.READY, 10)).items.map((i) => text(i.payload));
    expect(payloads).toEqual(["first", "held", "next"]);
    await admin.purgeQueue("{orders}");
  });
});
