/**
 * A pump waiting for items leases as soon as its own instance pushes to the
 * queue, without waiting for its blocking wake-up. To show it, the pump's
 * blocking connection goes to a second Redis where the queue never fills: the
 * only way an item reaches the stream there is `pushed()`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { pushItems } from "../../src/redis/scripts.js";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { testDispatchHost } from "../helpers/dispatch.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

const log = createLogger("error");
let queueRedis: StandaloneRedis;
let elsewhere: StandaloneRedis;
let main: RedisConnection;
let other: RedisConnection;

beforeAll(async () => {
  [queueRedis, elsewhere] = await Promise.all([startStandaloneRedis(), startStandaloneRedis()]);
  [main, other] = await Promise.all([connectRedis(queueRedis.target, log), connectRedis(elsewhere.target, log)]);
});
afterAll(async () => {
  await Promise.all([main.close(), other.close()]);
  await Promise.all([queueRedis.stop(), elsewhere.stop()]);
});

describe("QueueDispatcher.pushed", () => {
  it("delivers an item this instance pushed while the pump waits, with no blocking wake-up", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{wake}", mode: "reliable" }, clock.now());
    const wired: RedisConnection = { ...main, duplicate: () => other.duplicate() };
    const dispatcher = new QueueDispatcher(config, testDispatchHost(wired, clock, log));
    const delivered: Delivery[] = [];
    const sink = { deliver: (b: Delivery[]) => delivered.push(...b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    dispatcher.add(new LeaseStream(config, 5, sink, clock.now()));
    // The pump is parked on the other Redis (timeout 0: it never returns by itself).
    await expect.poll(async () => (await elsewhere.plain.info("clients")).match(/blocked_clients:(\d+)/)?.[1]).toBe("1");

    const push = pushItems(main.client, config.name, 0, [BulkStrings.of([Buffer.from("first"), Buffer.from("second")])]);
    dispatcher.pushed();
    await push;
    await expect.poll(() => delivered.length).toBe(2);
    expect(delivered.map((d) => Buffer.from(d.item.payload).toString())).toEqual(["first", "second"]);
    expect(await queueRedis.plain.llen(`${config.name}.processing`)).toBe(2);
    // Still one blocking read: the wait cut short is the one the pump waits on again.
    expect((await elsewhere.plain.info("clients")).match(/blocked_clients:(\d+)/)?.[1]).toBe("1");
    dispatcher.close();
  });
});
