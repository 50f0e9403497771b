/**
 * The subscriber connection (queue declarations and cron events arrive on it)
 * subscribes again after every reconnect. A reconnect whose SUBSCRIBE is cut
 * in flight must not leave a rejected promise nobody handles (Node then ends
 * the process: an instance would die of a flaky link), and the next
 * reconnect subscribes again. Found by the queue model test's cuts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { createLogger } from "../../src/log.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

let redis: StandaloneRedis;
let conn: RedisConnection | undefined;
let link: Link | undefined;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => unhandled.push(reason);

beforeAll(async () => {
  redis = await startStandaloneRedis();
  process.on("unhandledRejection", onUnhandled);
});
afterAll(async () => {
  process.off("unhandledRejection", onUnhandled);
  await conn?.close();
  await link?.close();
  await redis?.stop();
});

describe("a reconnect whose SUBSCRIBE is cut", () => {
  it("leaves no unhandled rejection, and the next reconnect subscribes again", async () => {
    let armed = false;
    let dropped = 0;
    // Once armed, the first connection that sends SUBSCRIBE is reset with the command unanswered.
    link = await startLink(redis.socketPath);
    link.drop = (chunk) => {
      if (!armed || !/subscribe/i.test(chunk.toString("latin1"))) return false;
      armed = false;
      dropped++;
      return true;
    };
    conn = await connectRedis({ kind: "standalone", url: `redis://${link.address}` }, createLogger("silent"));
    const got: string[] = [];
    await conn.subscribe("sy-test", (m) => got.push(m));
    armed = true;
    link.cut();
    await expect.poll(() => dropped).toBe(1);
    // Subscribed again on a later connection: a message published now arrives.
    await expect.poll(async () => {
      await redis.plain.publish("sy-test", "after");
      return got.includes("after");
    }).toBe(true);
    // A rejection nobody handles is reported on a later turn: give it one.
    await new Promise((r) => setImmediate(r));
    expect(unhandled.map(String)).toEqual([]);
  });
});
