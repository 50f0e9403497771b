/**
 * Limits with clear errors (SPEC S7, issue 6): open Lease streams per token and
 * the number of cron jobs are RESOURCE_EXHAUSTED with a message that names the
 * limit and its setting; a freed slot can be used again.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { SwitchyardClient, type LeaseSession } from "../../src/client/client.js";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const token = (name: string) => ({ name, token: randomBytes(24).toString("base64url") });
const admin = token("admin");
const workerA = token("worker-a");
const workerB = token("worker-b");

let redis: TestRedis;
let sy: TestSwitchyard;
const clients: SwitchyardClient[] = [];
const clientOf = (t: { token: string }) => {
  const c = new SwitchyardClient(sy.address, { token: t.token });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  const tokens = [admin, workerA, workerB].map((t) => ({
    name: t.name,
    sha256: tokenHash(t.token),
    scopes: t === admin ? ["*"] : ["queue:lease:{lim}"],
  }));
  redis = await startRedis();
  sy = await startSwitchyard(redis, {
    env: {
      SWITCHYARD_AUTH_TOKENS: JSON.stringify(tokens),
      SWITCHYARD_MAX_LEASE_STREAMS_PER_TOKEN: "2",
      // The built-in LogClean job counts as one.
      SWITCHYARD_MAX_CRON_JOBS: "3",
      SWITCHYARD_MAX_PAYLOAD_BYTES: "16",
      SWITCHYARD_MAX_ITEM_BYTES: "200",
      SWITCHYARD_MAX_ITEMS_PER_ENQUEUE: "2",
    },
    token: admin.token,
  });
  await sy.client.createQueue({ name: "{lim}", mode: QueueMode.RELIABLE });
});
afterAll(async () => {
  for (const c of clients) c.close();
  await sy?.stop();
  await redis?.stop();
});

describe("open Lease streams per token", () => {
  it("refuses a token's stream beyond the limit, naming the limit and the setting; other tokens and freed slots are unaffected", async () => {
    const a = clientOf(workerA);
    const open: LeaseSession[] = [a.lease("{lim}", 1), a.lease("{lim}", 1)];
    await Promise.all(open.map((s) => s.opened));
    const third = a.lease("{lim}", 1);
    const err = (await third.opened.catch((e: grpc.ServiceError) => e)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toBe(
      'caller "worker-a" already has 2 open Lease streams on this instance, the limit (SWITCHYARD_MAX_LEASE_STREAMS_PER_TOKEN=2); close one, or raise the limit',
    );
    // Another token has its own slots.
    const b = clientOf(workerB).lease("{lim}", 1);
    await b.opened;
    // A closed stream gives its slot back; so does a cancelled one.
    await open[0].close();
    const again = a.lease("{lim}", 1);
    await again.opened;
    open[1].cancel();
    await open[1].ended;
    await expect.poll(async () => {
      const s = a.lease("{lim}", 1);
      const ok = await s.opened.then(() => true, () => false);
      await s.close();
      return ok;
    }).toBe(true);
    await Promise.all([again.close(), b.close()]);
  });

  it("opens refused for a scope, or by the handler, keep no slot", async () => {
    const a = clientOf(workerA);
    const denied = a.lease("{elsewhere}", 1);
    expect((await denied.opened.catch((e: grpc.ServiceError) => e)) as grpc.ServiceError).toMatchObject({ code: grpc.status.PERMISSION_DENIED });
    const ops = clientOf(admin);
    for (let i = 0; i < 3; i++) {
      const undeclared = ops.lease("{undeclared}", 1);
      expect((await undeclared.opened.catch((e: grpc.ServiceError) => e)) as grpc.ServiceError).toMatchObject({ code: grpc.status.NOT_FOUND });
    }
    const four = [a.lease("{lim}", 1), a.lease("{lim}", 1), ops.lease("{lim}", 1), ops.lease("{lim}", 1)];
    await Promise.all(four.map((s) => s.opened));
    await Promise.all(four.map((s) => s.close()));
  });
});

describe("Enqueue limits", () => {
  it("name their settings", async () => {
    const big = (await sy.client.enqueue("{lim}", ["x".repeat(17)]).catch((e: grpc.ServiceError) => e)) as grpc.ServiceError;
    expect([big.code, big.details]).toEqual([
      grpc.status.RESOURCE_EXHAUSTED,
      "item 0 has a payload of 17 bytes; the limit is 16 (SWITCHYARD_MAX_PAYLOAD_BYTES)",
    ]);
    const many = (await sy.client.enqueue("{lim}", ["a", "b", "c"]).catch((e: grpc.ServiceError) => e)) as grpc.ServiceError;
    expect([many.code, many.details]).toEqual([
      grpc.status.INVALID_ARGUMENT,
      "3 items in one Enqueue; send at most 2 per call (SWITCHYARD_MAX_ITEMS_PER_ENQUEUE)",
    ]);
  });
});

describe("the stored size of an item", () => {
  it("counts its headers: an item whose headers take it over SWITCHYARD_MAX_ITEM_BYTES is refused, and nothing of the call is written", async () => {
    const before = await redis.plain.llen("{lim}");
    const err = (await sy.client
      .enqueue("{lim}", ["small", { payload: "tiny", headers: { note: "h".repeat(300) } }])
      .catch((e: grpc.ServiceError) => e)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(
      /^item 1 takes 3\d\d bytes stored \(a payload of 4 bytes, its headers, id and enqueue time\); the limit is 200 \(SWITCHYARD_MAX_ITEM_BYTES\)/,
    );
    expect(await redis.plain.llen("{lim}")).toBe(before);
    expect(await sy.client.enqueue("{lim}", [{ payload: "tiny", headers: { note: "fits" } }])).toHaveLength(1);
  });
});

describe("the number of cron jobs", () => {
  it("refuses CreateJob beyond SWITCHYARD_MAX_CRON_JOBS, and accepts it again once a job is deleted", async () => {
    const job = (name: string) => sy.client.createJob({ name, target: "HelloWorld", schedule: "0 0 3 * * *" });
    expect((await sy.client.listJobs()).jobs.map((j) => j.target)).toEqual(["LogClean"]);
    await job("one");
    const two = await job("two");
    const err = (await job("three").catch((e: grpc.ServiceError) => e)) as grpc.ServiceError;
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toBe("3 jobs exist, the limit (SWITCHYARD_MAX_CRON_JOBS=3); delete jobs you no longer need, or raise the limit");
    expect((await sy.client.listJobs()).jobs).toHaveLength(3);
    await sy.client.deleteJob(two.id);
    expect((await job("three")).name).toBe("three");
  });
});
