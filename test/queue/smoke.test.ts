import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";

let redis: TestRedis;
let sy: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

describe("smoke", () => {
  it("enqueues, leases and acks one reliable item", async () => {
    await sy.client.createQueue({ name: "{s}", mode: QueueMode.RELIABLE });
    await sy.client.enqueue("{s}", ["hello"]);
    const lease = sy.client.lease("{s}", 1);
    const [d] = await lease.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("hello");
    expect(await redis.plain.llen("{s}.processing")).toBe(1);
    await sy.client.ack(d.leaseToken);
    expect(await redis.plain.llen("{s}.processing")).toBe(0);
    await lease.close();
  });
});
