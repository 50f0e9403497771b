/**
 * SPEC S7, Q2, Q7: bad input never crashes the service or stores anything.
 * Every refusal is checked for its exact gRPC status, a message that says what
 * is wrong, and an unchanged Redis; after malformed bytes the server still serves.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { EnqueueRequestSchema, LeaseRequestSchema, QueueList, QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../src/client/client.js";

const QUEUES_HASH = "{switchyard}:queues";
const SERVICE = "/switchyard.v1.QueueService";

let redis: TestRedis;
let sy: TestSwitchyard;
let raw: grpc.Client;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  raw = new grpc.Client(sy.address, grpc.credentials.createInsecure());
});
afterAll(async () => {
  raw?.close();
  await sy?.stop();
  await redis?.stop();
});

/** The error a call failed with; fails the test if it succeeded. */
async function failure(call: Promise<unknown>, what = "the call"): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (err) {
    return err as grpc.ServiceError;
  }
  throw new Error(`expected ${what} to fail, but it succeeded`);
}

/**
 * Everything Redis holds, as text: every key with its type and contents, but
 * the audit log, which records refused calls too (test/auth/audit.test.ts).
 */
async function snapshot(): Promise<string> {
  const keys = (await redis.plain.keys("*")).filter((k) => !k.startsWith("{switchyard}:audit")).sort();
  const parts: string[] = [];
  for (const key of keys) {
    const type = await redis.plain.type(key);
    let value: unknown;
    if (type === "list") value = await redis.plain.lrange(key, 0, -1);
    else if (type === "hash") value = await redis.plain.hgetall(key);
    else if (type === "zset") value = await redis.plain.zrange(key, 0, -1, "WITHSCORES");
    else if (type === "string") value = await redis.plain.get(key);
    else value = type;
    parts.push(`${key} ${type} ${JSON.stringify(value)}`);
  }
  return parts.join("\n");
}

/** A unary call with raw bytes as the request; resolves to the status. */
function rawUnary(client: grpc.Client, path: string, bytes: Buffer): Promise<grpc.StatusObject> {
  return new Promise((ok) => {
    const call = client.makeUnaryRequest(
      path,
      (x: Buffer) => x,
      (b: Buffer) => b,
      bytes,
      new grpc.Metadata(),
      { deadline: Date.now() + 10_000 },
      () => undefined,
    );
    call.on("status", ok);
  });
}

/** A Lease stream that sends `frames` (raw bytes) and waits for the server's status. */
function rawLease(frames: Buffer[]): Promise<grpc.StatusObject> {
  return new Promise((ok) => {
    const call = raw.makeBidiStreamRequest(`${SERVICE}/Lease`, (x: Buffer) => x, (b: Buffer) => b, new grpc.Metadata(), {
      deadline: Date.now() + 10_000,
    });
    call.on("data", () => undefined);
    call.on("error", () => undefined);
    call.on("status", ok);
    for (const f of frames) call.write(f);
  });
}

async function leaseOne(queue: string): Promise<{ session: LeaseSession; delivery: Delivery }> {
  const session = sy.client.lease(queue, 1);
  const [delivery] = await session.take(1);
  return { session, delivery };
}

/** A token naming the same item with a fence number that was never issued. */
function withFence(token: string, fence: string): string {
  const parts = token.split(".");
  expect(parts[0]).toBe("r");
  parts[1] = fence;
  return parts.join(".");
}

describe("undeclared queues", () => {
  it("Enqueue on an undeclared queue is NOT_FOUND naming the queue, and stores nothing", async () => {
    const before = await snapshot();
    const err = await failure(sy.client.enqueue("never-declared", ["x"]));
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(err.details).toContain('"never-declared"');
    expect(await redis.plain.exists("never-declared")).toBe(0);
    expect(await snapshot()).toBe(before);
  });

  it("Lease on an undeclared queue is NOT_FOUND naming the queue", async () => {
    const session = sy.client.lease("{never-declared}", 1);
    const err = (await failure(session.opened)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.NOT_FOUND);
    expect(err.details).toContain('"{never-declared}"');
    expect(await session.ended).toMatchObject({ code: grpc.status.NOT_FOUND });
  });

  it("no queue name at all is INVALID_ARGUMENT saying the queue is required: Enqueue, Lease, GetQueueStats", async () => {
    const before = await snapshot();
    const required = { code: grpc.status.INVALID_ARGUMENT, details: "queue is required: the name of a declared queue" };
    expect(await failure(sy.client.enqueue("", ["x"]))).toMatchObject(required);
    const session = sy.client.lease("", 1);
    expect(await failure(session.opened)).toMatchObject(required);
    expect(await session.ended).toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
    expect(await failure(sy.client.getQueueStats(""))).toMatchObject(required);
    expect(await snapshot()).toBe(before);
  });
});

describe("CreateQueue refusals are INVALID_ARGUMENT and store nothing", () => {
  async function refused(queue: Parameters<TestSwitchyard["client"]["createQueue"]>[0], ...mustContain: string[]) {
    const before = await snapshot();
    const err = await failure(sy.client.createQueue(queue), `CreateQueue ${JSON.stringify(queue, (_, v) => (typeof v === "bigint" ? `${v}` : v))}`);
    expect(err.code, err.details).toBe(grpc.status.INVALID_ARGUMENT);
    for (const text of mustContain) expect(err.details).toContain(text);
    expect(await snapshot()).toBe(before);
    const name = queue.name ?? "";
    expect(await redis.plain.hexists(QUEUES_HASH, name)).toBe(0);
    expect(await redis.plain.exists(name || "\0", `${name}.processing`, `${name}.dead`, `${name}.fence`)).toBe(0);
    expect((await failure(sy.client.getQueue(name))).code).toBe(name ? grpc.status.NOT_FOUND : grpc.status.INVALID_ARGUMENT);
    return err;
  }

  it("a recovery set without min_idle", async () => {
    await refused({ name: "{r1}", mode: QueueMode.RELIABLE, recoverySet: "{r1}.claims" }, "min_idle");
  });

  it("recovery_ttl not longer than min_idle", async () => {
    await refused(
      { name: "{r2}", mode: QueueMode.RELIABLE, recoverySet: "{r2}.claims", minIdle: { seconds: 60n }, recoveryTtl: { seconds: 60n } },
      "recovery_ttl",
      "min_idle",
    );
    await refused(
      { name: "{r2}", mode: QueueMode.RELIABLE, recoverySet: "{r2}.claims", minIdle: { seconds: 60n }, recoveryTtl: { seconds: 30n } },
      "recovery_ttl",
    );
  });

  it("a reliable queue without a hash tag: its keys fall in different slots, and the message names the tag", async () => {
    await refused({ name: "jobs", mode: QueueMode.RELIABLE }, "{jobs}", "{jobs}.processing");
  });

  it("a processing list in another slot than the queue", async () => {
    await refused({ name: "{a}", mode: QueueMode.RELIABLE, processingList: "{b}.processing" }, "{a}", "{a}.processing", "{b}.processing");
  });

  it("a recovery set or dead-letter list in another slot than the queue", async () => {
    await refused({ name: "{c}", mode: QueueMode.RELIABLE, recoverySet: "claims", minIdle: { seconds: 60n } }, "{c}.processing");
    await refused({ name: "{d}", mode: QueueMode.RELIABLE, deadLetterList: "{e}.dead" }, "{d}.processing");
  });

  it("mode unspecified", async () => {
    await refused({ name: "{m}" }, "mode");
    await refused({ name: "{m}", mode: QueueMode.UNSPECIFIED }, "mode");
  });

  it("a SIMPLE queue with reliable-only options", async () => {
    await refused({ name: "simple.m", mode: QueueMode.SIMPLE, minIdle: { seconds: 60n } }, "min_idle");
    await refused({ name: "simple.m", mode: QueueMode.SIMPLE, processingList: "simple.m.p" }, "processing_list");
  });

  it("an empty name, or no queue at all", async () => {
    await refused({ name: "", mode: QueueMode.SIMPLE }, "name");
    // An empty CreateQueueRequest: no queue at all.
    const before = await snapshot();
    const status = await rawUnary(raw, `${SERVICE}/CreateQueue`, Buffer.alloc(0));
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toBe("queue is required");
    expect(await snapshot()).toBe(before);
  });

  it("a negative duration", async () => {
    await refused({ name: "{neg}", mode: QueueMode.RELIABLE, recoverySet: "{neg}.claims", minIdle: { seconds: -5n } }, "min_idle");
  });

  it("durations beyond the range of google.protobuf.Duration (recovery_ttl would break the lease script)", async () => {
    // Duration allows at most 315,576,000,000 s. Before bb466bd a larger recovery_ttl was accepted and
    // reached lease.lua as PEXPIRE 1e+21, which failed after the items were moved: none was ever delivered.
    await refused(
      {
        name: "{huge}",
        mode: QueueMode.RELIABLE,
        recoverySet: "{huge}.claims",
        minIdle: { seconds: 60n },
        recoveryTtl: { seconds: 1_000_000_000_000_000_000n },
      },
      "recovery_ttl",
    );
  });
});

describe("durations with sub-millisecond precision", () => {
  it("a recovery_ttl of 3600.0000005 s is a valid declaration and the queue still delivers", async () => {
    // Any google.protobuf.Duration is a valid input. Before bb466bd the ms value was stored as 3600000.0005,
    // lease.lua's PEXPIRE refused it after moving the items, and nothing was ever delivered.
    await sy.client.createQueue({
      name: "{frac}",
      mode: QueueMode.RELIABLE,
      recoverySet: "{frac}.claims",
      minIdle: { seconds: 60n },
      recoveryTtl: { seconds: 3600n, nanos: 500 },
    });
    await sy.client.enqueue("{frac}", ["fractional"]);
    const session = sy.client.lease("{frac}", 1);
    try {
      await session.opened;
      const delivered = await Promise.race([
        session.take(1).then(([d]) => Buffer.from(d.payload).toString()),
        new Promise<string>((ok) => setTimeout(() => ok("nothing delivered within 5 s"), 5_000)),
      ]);
      const where = { ready: await redis.plain.llen("{frac}"), processing: await redis.plain.llen("{frac}.processing") };
      expect({ delivered, ...where }).toEqual({ delivered: "fractional", ready: 0, processing: 1 });
      const ttl = await redis.plain.pttl("{frac}.claims");
      expect(ttl).toBeGreaterThan(3_590_000);
      expect(ttl).toBeLessThanOrEqual(3_600_001);
    } finally {
      // Leave nothing behind for the other tests' snapshots.
      await session.close();
      await sy.client.deleteQueue("{frac}", { purge: true });
    }
  });
});

describe("declaring the same queue twice", () => {
  it("identical options are a no-op; other options are ALREADY_EXISTS and change nothing", async () => {
    const spec = { name: "{twice}", mode: QueueMode.RELIABLE, recoverySet: "{twice}.claims", minIdle: { seconds: 60n } };
    const first = await sy.client.createQueue(spec);
    const stored = await redis.plain.hget(QUEUES_HASH, "{twice}");
    expect(stored).not.toBeNull();
    const again = await sy.client.createQueue(spec);
    expect(again.createTime).toEqual(first.createTime);
    expect(again.processingList).toBe("{twice}.processing");
    // Spelling out the defaults is the same declaration.
    await sy.client.createQueue({ ...spec, processingList: "{twice}.processing", deadLetterList: "{twice}.dead", maxDeliveries: 25 });
    expect(await redis.plain.hget(QUEUES_HASH, "{twice}")).toBe(stored);

    const before = await snapshot();
    const err = await failure(sy.client.createQueue({ ...spec, minIdle: { seconds: 120n } }));
    expect(err.code).toBe(grpc.status.ALREADY_EXISTS);
    expect(err.details).toContain('"{twice}"');
    expect((await failure(sy.client.createQueue({ name: "{twice}", mode: QueueMode.SIMPLE }))).code).toBe(grpc.status.ALREADY_EXISTS);
    expect(await snapshot()).toBe(before);
    expect((await sy.client.getQueue("{twice}")).minIdle?.seconds).toBe(60n);
  });
});

describe("limits", () => {
  let limited: TestSwitchyard;
  beforeAll(async () => {
    limited = await startSwitchyard(redis, {
      env: {
        SWITCHYARD_MAX_PAYLOAD_BYTES: "1024",
        SWITCHYARD_MAX_ITEMS_PER_ENQUEUE: "5",
        SWITCHYARD_MAX_MESSAGE_BYTES: "16384",
      },
    });
    await limited.client.createQueue({ name: "{lim}", mode: QueueMode.RELIABLE });
    await limited.client.createQueue({ name: "{lim-reply}", mode: QueueMode.RELIABLE });
  });
  afterAll(async () => {
    await limited?.stop();
  });

  it("a payload of exactly the limit is accepted", async () => {
    const before = await redis.plain.llen("{lim}");
    await limited.client.enqueue("{lim}", [Buffer.alloc(1024, 1)]);
    expect(await redis.plain.llen("{lim}")).toBe(before + 1);
  });

  it("a payload over the limit is RESOURCE_EXHAUSTED and nothing of the call is written", async () => {
    const before = await snapshot();
    const lengthBefore = await redis.plain.llen("{lim}");
    const err = await failure(limited.client.enqueue("{lim}", ["ok-1", Buffer.alloc(1025, 2), "ok-3"]));
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toContain("item 1");
    expect(err.details).toContain("1025");
    expect(err.details).toContain("1024");
    expect(await redis.plain.llen("{lim}")).toBe(lengthBefore);
    expect(await snapshot()).toBe(before);
  });

  it("too many items in one call is INVALID_ARGUMENT and nothing is written", async () => {
    const before = await snapshot();
    const err = await failure(limited.client.enqueue("{lim}", ["1", "2", "3", "4", "5", "6"]));
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toContain("6 items");
    expect(err.details).toContain("5");
    expect(await snapshot()).toBe(before);
    const lengthBefore = await redis.plain.llen("{lim}");
    expect(await limited.client.enqueue("{lim}", ["1", "2", "3", "4", "5"])).toHaveLength(5);
    expect(await redis.plain.llen("{lim}")).toBe(lengthBefore + 5);
  });

  it("no items at all is INVALID_ARGUMENT", async () => {
    const err = await failure(limited.client.enqueue("{lim}", []));
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toContain("items");
  });

  it("a gRPC message over SWITCHYARD_MAX_MESSAGE_BYTES is RESOURCE_EXHAUSTED, and the server keeps serving", async () => {
    const before = await snapshot();
    const err = await failure(limited.client.enqueue("{lim}", [Buffer.alloc(20_000, 3)]));
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(/larger than max/);
    expect(await snapshot()).toBe(before);
    const lengthBefore = await redis.plain.llen("{lim}");
    await limited.client.enqueue("{lim}", ["after"]);
    expect(await redis.plain.llen("{lim}")).toBe(lengthBefore + 1);
  });

  it("an ack whose reply is refused leaves the item held and writes no reply", async () => {
    await redis.plain.del("{lim}");
    await limited.client.enqueue("{lim}", ["job"]);
    const session = limited.client.lease("{lim}", 1);
    const [d] = await session.take(1);
    const before = await snapshot();
    const err = await failure(limited.client.ack(d.leaseToken, { queue: "{lim-reply}", items: [Buffer.alloc(2000)] }));
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    const undeclared = await failure(limited.client.ack(d.leaseToken, { queue: "{no-such-reply}", items: ["r"] }));
    expect(undeclared.code).toBe(grpc.status.NOT_FOUND);
    expect(undeclared.details).toContain('"{no-such-reply}"');
    expect(await snapshot()).toBe(before);
    expect(await redis.plain.llen("{lim}.processing")).toBe(1);
    expect(await redis.plain.llen("{lim-reply}")).toBe(0);
    await limited.client.ack(d.leaseToken);
    expect(await redis.plain.llen("{lim}.processing")).toBe(0);
    await session.close();
  });
});

describe("enqueue ttl", () => {
  beforeAll(async () => {
    await sy.client.createQueue({ name: "{ttl}", mode: QueueMode.RELIABLE });
  });

  function enqueueWithTtl(seconds: bigint, nanos = 0): Promise<grpc.StatusObject> {
    const request = create(EnqueueRequestSchema, { queue: "{ttl}", items: [{ payload: Buffer.from("x") }], ttl: { seconds, nanos } });
    return rawUnary(raw, `${SERVICE}/Enqueue`, Buffer.from(toBinary(EnqueueRequestSchema, request)));
  }

  it("a negative ttl is INVALID_ARGUMENT and nothing is written", async () => {
    const before = await snapshot();
    const status = await enqueueWithTtl(-1n);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("ttl");
    expect(await snapshot()).toBe(before);
  });

  it("the largest Duration is a valid ttl", async () => {
    await redis.plain.del("{ttl}");
    const status = await enqueueWithTtl(315_576_000_000n);
    expect(status.code).toBe(grpc.status.OK);
    expect(await redis.plain.llen("{ttl}")).toBe(1);
    expect(await redis.plain.pttl("{ttl}")).toBeGreaterThan(315_575_000_000_000);
    await redis.plain.del("{ttl}");
  });

  it("a ttl beyond the range of google.protobuf.Duration is INVALID_ARGUMENT, not an item pushed without its expiry", async () => {
    // Before bb466bd: OK, the item was pushed and PEXPIRE failed inside MULTI/EXEC unnoticed.
    await redis.plain.del("{ttl}");
    const before = await snapshot();
    const status = await enqueueWithTtl(10_000_000_000_000_000n);
    expect(status.code, "Enqueue with ttl = 1e16 s").toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("ttl");
    expect(await snapshot()).toBe(before);
  });
});

describe("a queue key that holds another type", () => {
  // Someone else's data under a declared queue's name: Switchyard must refuse to declare or enqueue,
  // say why, and leave that data alone (SPEC S7: never lose data).
  beforeAll(async () => {
    await redis.plain.set("{wt}", "not a list");
  });

  it("CreateQueue is FAILED_PRECONDITION naming the key and its type, and declares nothing", async () => {
    const err = await sy.client.createQueue({ name: "{wt}", mode: QueueMode.RELIABLE }).then(() => undefined, (e: grpc.ServiceError) => e);
    expect([err?.code, err?.details]).toEqual([grpc.status.FAILED_PRECONDITION, expect.stringMatching(/key "\{wt\}" already holds a string/)]);
    expect((await sy.client.listQueues()).queues.map((q) => q.name)).not.toContain("{wt}");
    // Declared while the key was free, then someone else wrote it: enqueues are refused below.
    await redis.plain.del("{wt}");
    await sy.client.createQueue({ name: "{wt}", mode: QueueMode.RELIABLE });
    await redis.plain.set("{wt}", "not a list");
  });

  for (const ttlMs of [0, 60_000]) {
    it(`Enqueue${ttlMs ? " with a ttl" : ""} is FAILED_PRECONDITION naming the key, and the key is untouched`, async () => {
      const outcome = await sy.client.enqueue("{wt}", ["lost?"], { ttlMs }).then(
        (ids) => ({ code: grpc.status.OK, details: `ids ${ids.join(",")}` }),
        (e: grpc.ServiceError) => ({ code: e.code, details: e.details }),
      );
      const key = { type: await redis.plain.type("{wt}"), value: await redis.plain.get("{wt}"), pttl: await redis.plain.pttl("{wt}") };
      expect({ outcome, key }).toEqual({
        outcome: { code: grpc.status.FAILED_PRECONDITION, details: expect.stringContaining('"{wt}"') },
        key: { type: "string", value: "not a list", pttl: -1 },
      });
    });
  }
});

describe("malformed messages", () => {
  const garbage = Buffer.from([0xff, 0xff, 0xff]);

  it("garbage bytes to Enqueue and CreateQueue are INVALID_ARGUMENT, and the server keeps serving", async () => {
    const before = await snapshot();
    for (const method of ["Enqueue", "CreateQueue", "Ack", "GetQueueStats"]) {
      const status = await rawUnary(raw, `${SERVICE}/${method}`, garbage);
      expect(status.code, `${method}: ${status.details}`).toBe(grpc.status.INVALID_ARGUMENT);
      expect(status.details).toContain("malformed");
    }
    expect(await snapshot()).toBe(before);
    await sy.client.createQueue({ name: "{after-garbage}", mode: QueueMode.RELIABLE });
    expect(await sy.client.enqueue("{after-garbage}", ["fine"])).toHaveLength(1);
    expect(await redis.plain.llen("{after-garbage}")).toBe(1);
  });

  it("a truncated Enqueue, or one with invalid UTF-8 in its queue name, is INVALID_ARGUMENT saying why, and stores nothing", async () => {
    await sy.client.createQueue({ name: "{cut-short}", mode: QueueMode.RELIABLE });
    const before = await snapshot();
    const whole = Buffer.from(toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { queue: "{cut-short}", items: [{ payload: Buffer.from("p") }] })));
    let status = await rawUnary(raw, `${SERVICE}/Enqueue`, whole.subarray(0, whole.length - 1));
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toBe("malformed switchyard.v1.EnqueueRequest: premature EOF");
    status = await rawUnary(raw, `${SERVICE}/Enqueue`, Buffer.from([0x0a, 0x02, 0x71, 0xff]));
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toBe("malformed switchyard.v1.EnqueueRequest: The encoded data was not valid for encoding utf-8");
    expect(await snapshot()).toBe(before);
  });

  it("an Enqueue with its fields out of order and unknown fields between them is served", async () => {
    await sy.client.createQueue({ name: "{loose}", mode: QueueMode.RELIABLE });
    const w = new BinaryWriter();
    w.tag(2, WireType.LengthDelimited).fork().tag(9, WireType.Varint).uint32(1).tag(1, WireType.LengthDelimited).bytes(Buffer.from("one")).join();
    w.tag(99, WireType.StartGroup).tag(1, WireType.Bit64).fixed64(3n).tag(99, WireType.EndGroup);
    w.tag(1, WireType.LengthDelimited).string("{loose}");
    w.tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).bytes(Buffer.from("two")).join();
    w.tag(7, WireType.Bit32).fixed32(5);
    const status = await rawUnary(raw, `${SERVICE}/Enqueue`, Buffer.from(w.finish()));
    expect(status.code, status.details).toBe(grpc.status.OK);
    const page = await sy.client.peekQueue("{loose}", QueueList.READY, 10);
    expect(page.items.map((i) => Buffer.from(i.payload).toString())).toEqual(["one", "two"]);
  });

  it("garbage bytes to the health service are INVALID_ARGUMENT, for Check and for Watch", async () => {
    const status = await rawUnary(raw, "/grpc.health.v1.Health/Check", garbage);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    const watched: Buffer[] = [];
    const watchStatus = await new Promise<grpc.StatusObject>((ok) => {
      const call = raw.makeServerStreamRequest("/grpc.health.v1.Health/Watch", (x: Buffer) => x, (b: Buffer) => b, garbage, new grpc.Metadata(), {
        deadline: Date.now() + 5_000,
      });
      call.on("data", (b: Buffer) => watched.push(b));
      call.on("error", () => undefined);
      call.on("status", ok);
    });
    expect(watchStatus.code, watchStatus.details).toBe(grpc.status.INVALID_ARGUMENT);
    expect(watched).toEqual([]);
  });

  it("garbage bytes on a reflection stream are INVALID_ARGUMENT", async () => {
    const status = await new Promise<grpc.StatusObject>((ok) => {
      const call = raw.makeBidiStreamRequest(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        (x: Buffer) => x,
        (b: Buffer) => b,
        new grpc.Metadata(),
        { deadline: Date.now() + 5_000 },
      );
      call.on("data", () => undefined);
      call.on("error", () => undefined);
      call.on("status", ok);
      call.write(garbage);
    });
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("a call to an unknown method is UNIMPLEMENTED", async () => {
    const status = await rawUnary(raw, `${SERVICE}/NoSuchMethod`, Buffer.alloc(0));
    expect(status.code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it("a Lease stream whose first message is garbage is INVALID_ARGUMENT", async () => {
    const status = await rawLease([garbage]);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("malformed");
  });

  it("a Lease stream whose first message is not open is INVALID_ARGUMENT", async () => {
    const ack = Buffer.from(toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind: { case: "ack", value: { leaseToken: "x" } } })));
    let status = await rawLease([ack]);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("open");
    // An empty LeaseRequest (no kind set) is not an open either.
    status = await rawLease([Buffer.alloc(0)]);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("open");
  });

  it("a second open on a Lease stream is INVALID_ARGUMENT", async () => {
    await sy.client.createQueue({ name: "{twice-open}", mode: QueueMode.RELIABLE });
    const open = Buffer.from(
      toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind: { case: "open", value: { queue: "{twice-open}", credit: 1 } } })),
    );
    const status = await rawLease([open, open]);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toContain("once");
  });

  it("a raw connection that sends garbage does not disturb other clients' streams", async () => {
    await sy.client.createQueue({ name: "{bystander}", mode: QueueMode.RELIABLE });
    const session = sy.client.lease("{bystander}", 1);
    await session.opened;
    await rawLease([garbage]);
    await rawUnary(raw, `${SERVICE}/Enqueue`, garbage);
    await sy.client.enqueue("{bystander}", ["still here"]);
    const [d] = await session.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("still here");
    await sy.client.ack(d.leaseToken);
    await session.close();
  });
});

describe("lease tokens", () => {
  beforeAll(async () => {
    await sy.client.createQueue({ name: "{tok}", mode: QueueMode.RELIABLE, recoverySet: "{tok}.claims", minIdle: { seconds: 60n } });
  });

  const settles = {
    ack: (t: string) => sy.client.ack(t),
    retry: (t: string) => sy.client.retry(t),
    drop: (t: string) => sy.client.drop(t),
    extendLease: (t: string) => sy.client.extendLease(t),
  };

  it("a garbage or empty token is INVALID_ARGUMENT on Ack, Retry, Drop and ExtendLease", async () => {
    const before = await snapshot();
    for (const [name, settle] of Object.entries(settles)) {
      for (const token of ["not-a-token", "r.1.zz.e3Rva30", "r.1.0000000000.!!", "s.x.e3Rva30"]) {
        const err = await failure(settle(token));
        expect(err.code, `${name}(${token})`).toBe(grpc.status.INVALID_ARGUMENT);
        expect(err.details).toContain("lease_token");
      }
      const empty = await failure(settle(""));
      expect(empty.code, name).toBe(grpc.status.INVALID_ARGUMENT);
      expect(empty.details).toContain("lease_token is required");
    }
    expect(await snapshot()).toBe(before);
  });

  it("bad tokens sent on a Lease stream get a settle result with the precise code, and the stream carries on", async () => {
    const session = sy.client.lease("{tok}", 1);
    await session.opened;
    const results: { token: string; code: number; message: string }[] = [];
    session.onSettleResult((r) => results.push({ token: r.leaseToken, code: r.code, message: r.message }));
    session.ack("garbage");
    session.extend("");
    session.retry(`r.1.aaaaaaaaaa.${Buffer.from("{nowhere}").toString("base64url")}`);
    const deadline = Date.now() + 5_000;
    while (results.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(results.map((r) => [r.token, r.code])).toEqual([
      ["garbage", grpc.status.INVALID_ARGUMENT],
      ["", grpc.status.INVALID_ARGUMENT],
      [`r.1.aaaaaaaaaa.${Buffer.from("{nowhere}").toString("base64url")}`, grpc.status.NOT_FOUND],
    ]);
    expect(results[0].message).toContain("lease_token");
    await sy.client.enqueue("{tok}", ["after bad settles"]);
    const [d] = await session.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("after bad settles");
    session.ack(d.leaseToken);
    const settled = Date.now() + 5_000;
    while ((await redis.plain.llen("{tok}.processing")) > 0 && Date.now() < settled) await new Promise((r) => setTimeout(r, 10));
    expect(await redis.plain.llen("{tok}.processing")).toBe(0);
    await session.close();
  });

  it("a token for an undeclared queue is NOT_FOUND", async () => {
    const token = `r.1.aaaaaaaaaa.${Buffer.from("{nowhere}").toString("base64url")}`;
    for (const settle of Object.values(settles)) {
      const err = await failure(settle(token));
      expect(err.code).toBe(grpc.status.NOT_FOUND);
      expect(err.details).toContain('"{nowhere}"');
    }
  });

  it("a token already acked is FAILED_PRECONDITION on Ack, Retry, Drop and ExtendLease", async () => {
    await sy.client.enqueue("{tok}", ["acked-once"]);
    const { session, delivery } = await leaseOne("{tok}");
    await sy.client.ack(delivery.leaseToken);
    const before = await snapshot();
    for (const [name, settle] of Object.entries(settles)) {
      const err = await failure(settle(delivery.leaseToken));
      expect(err.code, name).toBe(grpc.status.FAILED_PRECONDITION);
      expect(err.details).toContain("no longer held");
    }
    expect(await snapshot()).toBe(before);
    await session.close();
  });

  it("a well-formed token for a fence never issued is NOT_FOUND (item already settled)", async () => {
    await sy.client.enqueue("{tok}", ["settled"]);
    const { session, delivery } = await leaseOne("{tok}");
    await sy.client.ack(delivery.leaseToken);
    const forged = withFence(delivery.leaseToken, "999999999999999");
    for (const [name, settle] of Object.entries(settles)) {
      const err = await failure(settle(forged));
      expect(err.code, `${name}: ${err.details}`).toBe(grpc.status.NOT_FOUND);
      expect(err.details).toContain("999999999999999");
    }
    await session.close();
  });

  it("a well-formed token for a fence never issued is NOT_FOUND and changes nothing (item still held)", async () => {
    await sy.client.enqueue("{tok}", ["held"]);
    const { session, delivery } = await leaseOne("{tok}");
    const forged = withFence(delivery.leaseToken, "999999999999999");
    const before = await snapshot();
    const codes: Record<string, number> = {};
    for (const [name, settle] of Object.entries(settles)) codes[name] = (await failure(settle(forged))).code;
    // Whatever the code, the real delivery is untouched and still settles.
    expect(await snapshot()).toBe(before);
    await sy.client.ack(delivery.leaseToken);
    expect(await redis.plain.llen("{tok}.processing")).toBe(0);
    await session.close();
    expect(codes).toEqual({
      ack: grpc.status.NOT_FOUND,
      retry: grpc.status.NOT_FOUND,
      drop: grpc.status.NOT_FOUND,
      extendLease: grpc.status.NOT_FOUND,
    });
  });

  it("fence 0 was never issued either (fences start at 1): NOT_FOUND, held or not", async () => {
    await sy.client.enqueue("{tok}", ["zero"]);
    const { session, delivery } = await leaseOne("{tok}");
    const zero = withFence(delivery.leaseToken, "0");
    const before = await snapshot();
    const whileHeld = (await failure(sy.client.ack(zero))).code;
    expect(await snapshot()).toBe(before);
    await sy.client.ack(delivery.leaseToken);
    const afterAck = (await failure(sy.client.ack(zero))).code;
    await session.close();
    expect({ whileHeld, afterAck }).toEqual({ whileHeld: grpc.status.NOT_FOUND, afterAck: grpc.status.NOT_FOUND });
  });
});

describe("lease credit", () => {
  beforeAll(async () => {
    await sy.client.createQueue({ name: "{credit}", mode: QueueMode.RELIABLE });
  });

  for (const credit of [0, 10_001, 4_294_967_295]) {
    it(`open with credit ${credit} is INVALID_ARGUMENT`, async () => {
      const session = sy.client.lease("{credit}", credit);
      const err = await failure(session.opened);
      expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(err.details).toContain("credit must be between 1 and 10000");
      await session.ended;
    });
  }

  it("the maximum credit is accepted; raising a stream's credit above it ends the stream with INVALID_ARGUMENT", async () => {
    const session = sy.client.lease("{credit}", 10_000);
    await session.opened;
    session.setCredit(10_001);
    const err = await session.ended;
    expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err?.details).toContain("credit");
  });

  it("after all of the above the server still serves", async () => {
    await sy.client.enqueue("{credit}", ["alive"]);
    const { session, delivery } = await leaseOne("{credit}");
    expect(Buffer.from(delivery.payload).toString()).toBe("alive");
    await sy.client.ack(delivery.leaseToken);
    await session.close();
    expect(await redis.plain.llen("{credit}.processing")).toBe(0);
  });
});
