/**
 * Redis out of memory (maxmemory with noeviction): writes fail with
 * RESOURCE_EXHAUSTED and Redis's reason, not INTERNAL, and nothing of a
 * refused batch is written.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { Code, statusOf } from "../helpers/grpc-status.js";

let redis: StandaloneRedis;
let sy: TestSwitchyard;
let client: SwitchyardClient;
beforeAll(async () => {
  redis = await startStandaloneRedis();
  sy = await startSwitchyard(redis);
  client = new SwitchyardClient(sy.address, { enqueueStream: false });
});
afterAll(async () => {
  client.close();
  await sy.stop();
  await redis.stop();
});

describe("Redis out of memory", () => {
  it("refuses enqueues with RESOURCE_EXHAUSTED naming the reason, writes none of a refused batch, and takes them again once Redis has room", async () => {
    const Q = "{oom}";
    await client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await client.enqueue(Q, ["before"]);
    await redis.plain.config("SET", "maxmemory-policy", "noeviction");
    await redis.plain.config("SET", "maxmemory", "1"); // already over it: every write is refused
    try {
      const batch = await statusOf(client.enqueue(Q, Array.from({ length: 1000 }, (_, i) => `item-${i}`)));
      expect(batch.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(batch.details).toMatch(/^redis refused the command: OOM command not allowed when used memory > 'maxmemory'/);
      const withTtl = await statusOf(client.enqueue(Q, ["expiring"], { ttlMs: 60_000 })); // push.lua: a script's write
      expect(withTtl.code).toBe(Code.RESOURCE_EXHAUSTED);
      expect(withTtl.details).toMatch(/OOM command not allowed/);
      expect(await redis.plain.llen(Q)).toBe(1);
    } finally {
      await redis.plain.config("SET", "maxmemory", "0");
    }
    await client.enqueue(Q, ["after"]);
    expect(await redis.plain.llen(Q)).toBe(2);
  });

  it("still leases and settles while Redis is full, so workers drain it", async () => {
    const Q = "{oom-drain}";
    await client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await client.enqueue(Q, ["a", "b", "c"]);
    await redis.plain.config("SET", "maxmemory-policy", "noeviction");
    await redis.plain.config("SET", "maxmemory", "1");
    try {
      const lease = client.lease(Q, 3);
      const got = await lease.take(3);
      for (const d of got) await client.ack(d.leaseToken);
      expect(await redis.plain.llen(Q)).toBe(0);
      expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
      await lease.close();
    } finally {
      await redis.plain.config("SET", "maxmemory", "0");
    }
  });
});
