/**
 * SPEC Q8: Ack, Retry and Drop work from any instance, given the lease token.
 * A delivery settled through another instance than the one whose stream holds
 * it must free that stream's credit, or the stream takes nothing more once its
 * credit is used up this way: on a reliable queue by the holder's heartbeat
 * check (it reads the delivery's record), on a simple queue, which has no
 * record, by the settling instance's announcement. Found by reading, while
 * writing the queue model test; the simple case failed before.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const HEARTBEAT_MS = 15_000;
let redis: TestRedis;
let holder: TestSwitchyard;
let other: TestSwitchyard;
const clock = new ManualClock();

beforeAll(async () => {
  redis = await startRedis();
  holder = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
  other = await startSwitchyard(redis, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
});
afterAll(async () => {
  await other?.stop();
  await holder?.stop();
  await redis?.stop();
});

describe("a delivery settled through another instance", () => {
  for (const [mode, name] of [[QueueMode.RELIABLE, "{elsewhere-reliable}"], [QueueMode.SIMPLE, "{elsewhere-simple}"]] as const) {
    it(`frees its stream's credit by the next heartbeat (${name})`, async () => {
      await holder.client.createQueue({ name, mode });
      await holder.client.enqueue(name, ["first", "second"]);
      const session = holder.client.lease(name, 1);
      const [first] = await session.take(1);
      await other.client.ack(first.leaseToken);
      await clock.advance(HEARTBEAT_MS);
      const [second] = await session.take(1);
      expect(Buffer.from(second.payload).toString()).toBe("second");
      await session.close();
    });
  }
});
