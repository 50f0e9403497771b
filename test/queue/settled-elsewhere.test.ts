/**
 * SPEC Q8: Ack, Retry and Drop work from any instance, given the lease token.
 * A delivery settled through another instance than the one whose stream holds
 * it must free that stream's credit, or the stream takes nothing more once its
 * credit is used up this way: on a reliable queue by the holder's heartbeat
 * check (it reads the delivery's record), on a simple queue, which has no
 * record, by the settling instance's announcement. Found by reading, while
 * writing the queue model test; the simple case failed before. An announcement
 * made while the holder's pub/sub connection was being made again reaches it
 * once it listens again (the model tests at 50 × 150 steps, seed 141: the
 * stream's credit stayed taken for good).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ManualClock } from "../../src/clock.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startLink } from "../helpers/link.js";
import { startRedis, startStandaloneRedis, type TestRedis } from "../helpers/redis.js";
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

describe("a simple delivery settled through another instance while the holder's Redis connections are down", () => {
  it("frees its stream's credit once the holder listens again", { timeout: 15_000 }, async () => {
    const name = "{elsewhere-missed}";
    const own = await startStandaloneRedis();
    const link = await startLink(own.socketPath);
    const cut = await startSwitchyard({ target: { kind: "standalone", url: `redis://${link.address}` } }, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
    const elsewhere = await startSwitchyard(own, { clock, config: { heartbeatIntervalMs: HEARTBEAT_MS } });
    try {
      await elsewhere.client.createQueue({ name, mode: QueueMode.SIMPLE });
      await elsewhere.client.enqueue(name, ["first", "second"]);
      const session = cut.client.lease(name, 1);
      const [first] = await session.take(1);
      link.down(); // every connection of the holder, its pub/sub one too, is lost and cannot be made again
      await elsewhere.client.ack(first.leaseToken); // announced while nobody on the holder listens
      const reconnected = new Promise((ok) => cut.app.redis.client.once("ready", ok));
      link.up();
      await reconnected;
      const [second] = await session.take(1);
      expect(Buffer.from(second.payload).toString()).toBe("second");
      expect(await own.plain.zrange(systemKeys("switchyard").recentlyReleased, 0, -1)).toEqual([first.leaseToken]);
      await session.close();
    } finally {
      await cut.stop();
      await elsewhere.stop();
      await link.close();
      await own.stop();
    }
  });
});
