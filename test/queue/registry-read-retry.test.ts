/**
 * The registry's full read of the declarations after a reconnect, when it
 * fails (src/queue/registry.ts, readAll): it is tried again every second until
 * it succeeds, and the log says so once, not once a second. Here the read fails
 * because another client left a string where the declarations hash belongs
 * (WRONGTYPE), a failure that lasts as long as an outage would; the retries run
 * on a ManualClock.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { connectRedis } from "../../src/redis/connection.js";
import { systemKeys } from "../../src/redis/keys.js";
import { QueueRegistry } from "../../src/queue/registry.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

const keys = systemKeys("switchyard");
let redis: StandaloneRedis;

beforeAll(async () => {
  redis = await startStandaloneRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describe("a full read of the declarations that keeps failing", () => {
  it("warns once, retries every second at debug level, and says when a read succeeds again", async () => {
    const lines: { level: string; msg: string; failedReads?: number }[] = [];
    const log = createLogger("debug", (line) => lines.push(JSON.parse(line)));
    const connection = await connectRedis({ kind: "socket", path: redis.socketPath }, log);
    const clock = new ManualClock();
    const registry = new QueueRegistry(connection, keys, clock, log);
    try {
      await registry.start();
      await registry.create({ name: "{retry}", mode: "reliable" });
      const about = (text: string) => lines.filter((l) => l.msg.includes(text));

      // The declarations key holds a string now: every full read fails (WRONGTYPE).
      await redis.plain.rename(keys.queues, `${keys.queues}.aside`);
      await redis.plain.set(keys.queues, "not a hash");
      // The subscriber reconnects, and the registry reads every declaration again.
      await redis.plain.client("KILL", "TYPE", "pubsub");
      await expect.poll(() => about("could not read the queue declarations").length, { timeout: 5000 }).toBe(1);
      for (let n = 2; n <= 6; n++) {
        await clock.advance(1000);
        await expect.poll(() => about("could not read the queue declarations").length).toBe(n);
      }
      const failures = about("could not read the queue declarations");
      expect(failures.map((l) => [l.level, l.failedReads])).toEqual([["warn", 1], ["debug", 2], ["debug", 3], ["debug", 4], ["debug", 5], ["debug", 6]]);
      expect(registry.cached("{retry}")?.name).toBe("{retry}"); // the cache stays as it was

      await redis.plain.del(keys.queues);
      await redis.plain.rename(`${keys.queues}.aside`, keys.queues);
      await clock.advance(1000);
      await expect.poll(() => lines.filter((l) => l.msg === "read the queue declarations again").map((l) => [l.level, l.failedReads])).toEqual([["info", 6]]);
      // No more retries once a read succeeded.
      await clock.advance(5000);
      expect(about("could not read the queue declarations")).toHaveLength(6);
    } finally {
      await registry.stop();
      await connection.close();
    }
  });
});
