/**
 * A pump that leased fewer items than its streams had credit for knows the
 * queue is empty: it waits for the next push instead of calling the lease
 * script again to find nothing (at a trickle, one script call per item
 * saved). Items pushed while it leases still reach the stream.
 */
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { pushItems } from "../../src/redis/scripts.js";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { testDispatchHost, useDispatchRedis } from "../helpers/dispatch.js";

const log = createLogger("error");
const t = useDispatchRedis(log);

/** Pushes and script calls Redis has run (LPUSH; EVALSHA, and EVAL for a script's first call). */
async function scriptCalls(): Promise<number> {
  const stats = await t.redis.plain.info("commandstats");
  return [...stats.matchAll(/cmdstat_(?:eval|evalsha|lpush):calls=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
}

describe("a pump that took fewer items than it asked for", () => {
  it("waits for the next push without another lease call, and still delivers every item", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{drained}", mode: "reliable" }, clock.now());
    const dispatcher = new QueueDispatcher(config, testDispatchHost(t.conn, clock, log));
    const delivered: Delivery[] = [];
    const sink = { deliver: (b: Delivery[]) => delivered.push(...b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    dispatcher.add(new LeaseStream(config, 5, sink, clock.now()));
    const blocked = async () => (await t.redis.plain.info("clients")).match(/blocked_clients:(\d+)/)?.[1];
    await expect.poll(blocked).toBe("1");

    for (const [round, payloads] of [["a", "b"], ["c"]].entries()) {
      const before = await scriptCalls();
      const push = pushItems(t.conn.client, config.name, 0, [BulkStrings.of(payloads.map((p) => Buffer.from(p)))]);
      dispatcher.pushed();
      await push;
      await expect.poll(() => delivered.length).toBe(round === 0 ? 2 : 3);
      await expect.poll(blocked).toBe("1"); // parked again
      // The push and one lease.lua that took the items; no second lease call finding the queue empty.
      expect(await scriptCalls(), `round ${round}`).toBe(before + 2);
    }
    expect(delivered.map((d) => Buffer.from(d.item.payload).toString())).toEqual(["a", "b", "c"]);
    expect(await t.redis.plain.llen(`${config.name}.processing`)).toBe(3);
    dispatcher.close();
  });
});
