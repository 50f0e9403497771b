/**
 * SPEC Q15, issue 12 defect 1: a queue declaration can name only keys outside
 * Switchyard's own hash tag and under the declaring caller's admin scope, and
 * never keys that hold another type or belong to another queue. Tried as a
 * tenant with `queue:admin:tenant-a.*` would try it.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { SwitchyardClient } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let sy: TestSwitchyard;
let second: TestSwitchyard;
let tenant: SwitchyardClient;
let admin: SwitchyardClient;

const TENANT_TOKEN = randomBytes(24).toString("base64url");
const ADMIN_TOKEN = randomBytes(24).toString("base64url");

beforeAll(async () => {
  redis = await startRedis();
  const tokens = JSON.stringify([
    { name: "tenant-a", sha256: tokenHash(TENANT_TOKEN), scopes: ["queue:admin:tenant-a.*", "queue:enqueue:tenant-a.*", "queue:lease:tenant-a.*"] },
    { name: "admin", sha256: tokenHash(ADMIN_TOKEN), scopes: ["*"] },
  ]);
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: tokens } });
  second = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: tokens }, token: ADMIN_TOKEN });
  tenant = new SwitchyardClient(sy.address, { token: TENANT_TOKEN });
  admin = new SwitchyardClient(sy.address, { token: ADMIN_TOKEN });
  // Switchyard's own state, which no tenant may reach.
  await admin.createJob({ name: "nightly", target: "HelloWorld", schedule: "0 0 3 * * *" });
});
afterAll(async () => {
  tenant?.close();
  admin?.close();
  await second?.stop();
  await sy?.stop();
  await redis?.stop();
});

/** The status a call ended with (code 0: it succeeded). */
async function status(call: Promise<unknown>): Promise<{ code: number; details: string }> {
  return call.then(
    () => ({ code: grpc.status.OK, details: "" }),
    (e: grpc.ServiceError) => ({ code: e.code, details: e.details }),
  );
}

/** Every key of Switchyard's own, with its type: what no declaration may change. */
async function ownKeys(): Promise<string[]> {
  // They share one hash slot: on a cluster, KEYS must go to the node that holds it.
  const node = redis.nodeFor("{switchyard}");
  const keys = (await node.keys("*{switchyard}*")).sort();
  return Promise.all(keys.map(async (k) => `${k}:${await node.type(k)}`));
}

describe("a declaration that names Switchyard's own keys", () => {
  it("is refused when the namespace's hash tag sits anywhere in the queue's name", async () => {
    const before = await ownKeys();
    for (const name of ["tenant-a.{switchyard}", "tenant-a.x{switchyard}y"]) {
      const r = await status(tenant.createQueue({ name, mode: QueueMode.SIMPLE }));
      expect([r.code, r.details], name).toEqual([grpc.status.INVALID_ARGUMENT, expect.stringContaining("{switchyard}")]);
    }
    expect(await ownKeys()).toEqual(before);
  });

  it("is refused when a processing list, recovery set or dead-letter list names a key of the namespace", async () => {
    const before = await ownKeys();
    const name = "tenant-a.{switchyard}q";
    for (const keys of [
      { processingList: "{switchyard}:jobs" },
      { recoverySet: "{switchyard}:audit:order", minIdle: { seconds: 60n } },
      { deadLetterList: "{switchyard}:queues" },
    ]) {
      const r = await status(admin.createQueue({ name, mode: QueueMode.RELIABLE, ...keys }));
      expect([r.code, r.details], JSON.stringify(keys, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))).toEqual([
        grpc.status.INVALID_ARGUMENT,
        expect.stringContaining("Switchyard's own"),
      ]);
    }
    // Not even an administrator of everything can: the namespace is not a queue.
    expect(await ownKeys()).toEqual(before);
    expect((await admin.listJobs()).jobs.map((j) => j.name)).toContain("nightly");
  });
});

describe("a declaration that names keys outside the caller's scope", () => {
  it("is PERMISSION_DENIED for each named key the caller does not administer", async () => {
    for (const keys of [
      { processingList: "{payments}.processing" },
      { deadLetterList: "{payments}" },
      { recoverySet: "{payments}.claims", minIdle: { seconds: 60n } },
    ]) {
      const r = await status(tenant.createQueue({ name: "tenant-a.{payments}", mode: QueueMode.RELIABLE, ...keys }));
      expect(r.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(r.details).toContain("queue:admin");
    }
    expect((await admin.listQueues()).queues.map((q) => q.name)).not.toContain("tenant-a.{payments}");
  });

  it("accepts keys in the queue's own namespace (<name>.…) and keys the scope covers", async () => {
    const queue = await tenant.createQueue({
      name: "tenant-a.{a1}",
      mode: QueueMode.RELIABLE,
      recoverySet: "tenant-a.{a1}.claims",
      minIdle: { seconds: 60n },
    });
    expect([queue.processingList, queue.deadLetterList]).toEqual(["tenant-a.{a1}.processing", "tenant-a.{a1}.dead"]);
    const other = await tenant.createQueue({ name: "tenant-a.{a2}", mode: QueueMode.RELIABLE, deadLetterList: "tenant-a.dead.{a2}" });
    expect(other.deadLetterList).toBe("tenant-a.dead.{a2}");
  });
});

describe("keys that are not free", () => {
  it("a key of another queue is ALREADY_EXISTS, even when two instances declare at the same moment", async () => {
    // Twenty races: two queues, one dead-letter list, declared through two instances at once.
    for (let n = 0; n < 20; n++) {
      const dead = `{race${n}}.dead`;
      const results = await Promise.all([
        status(admin.createQueue({ name: `{race${n}}.a`, mode: QueueMode.RELIABLE, deadLetterList: dead })),
        status(second.client.createQueue({ name: `{race${n}}.b`, mode: QueueMode.RELIABLE, deadLetterList: dead })),
      ]);
      expect(results.map((r) => r.code).sort(), `race ${n}`).toEqual([grpc.status.OK, grpc.status.ALREADY_EXISTS]);
    }
  });

  it("a key that holds another type is FAILED_PRECONDITION naming it, and the key is untouched", async () => {
    await redis.plain.hset("tenant-a.{t}.claims", "someone", "else");
    const r = await status(
      tenant.createQueue({ name: "tenant-a.{t}", mode: QueueMode.RELIABLE, recoverySet: "tenant-a.{t}.claims", minIdle: { seconds: 60n } }),
    );
    expect([r.code, r.details]).toEqual([grpc.status.FAILED_PRECONDITION, expect.stringContaining('"tenant-a.{t}.claims" already holds a hash')]);
    expect(await redis.plain.hgetall("tenant-a.{t}.claims")).toEqual({ someone: "else" });
  });
});
