/**
 * Items a lease took for a stream that could not take them (it had ended, not
 * yet closed) go back to the front of the queue, uncounted, and no lease goes
 * out before they are back: a lease sent at once would reach Redis before the
 * give-back (which, as Returns does, goes through the Settler a turn later)
 * and take the items behind them first (SPEC Q1: items leave in the order they
 * entered).
 */
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { pushItems, settleItems } from "../../src/redis/scripts.js";
import { keysOf, validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { deliveryField, type LeaseRef } from "../../src/queue/token.js";
import { testDispatchHost, useDispatchRedis } from "../helpers/dispatch.js";

const log = createLogger("error");
const t = useDispatchRedis(log);

describe("items no stream could take", () => {
  it("are back at the front before the next lease: the stream with credit gets them first, in order", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{give-back-order}", mode: "reliable" }, clock.now());
    const given: number[][] = [];
    // As Returns and the Settler do: the give-back is sent a turn later (setImmediate), and answers after a round trip.
    const giveBack = (_: unknown, refs: LeaseRef[]) => {
      given.push(refs.map((r) => r.fence));
      return new Promise((resolve, reject) => setImmediate(() => {
        const ops = refs.map((r) => ({ action: "undo" as const, delivery: deliveryField(r) }));
        settleItems(t.conn.client, keysOf(config), { now: clock.now(), maxDeliveries: 25, retryPolicy: "0,1,0,0", publishTtlMs: 0 }, ops).then(resolve, reject);
      }));
    };
    const dispatcher = new QueueDispatcher(config, { ...testDispatchHost(t.conn, clock, log), giveBack });
    await pushItems(t.conn.client, config.name, 0, [BulkStrings.of(["a", "b", "c"].map((p) => Buffer.from(p)))]);
    // The first stream has ended: it refuses what it is sent (and takes no more).
    const ended = { deliver: () => false, heartbeat() {}, fail() {}, drain() {}, end() {} };
    const got: Delivery[] = [];
    const open = { deliver: (b: Delivery[]) => got.push(...b) >= 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    // The first lease asks for the ended stream's credit alone (the second is added after it is sent): "a" and "b".
    dispatcher.add(new LeaseStream(config, 2, ended, clock.now()));
    dispatcher.add(new LeaseStream(config, 5, open, clock.now()));
    await expect.poll(() => got.length).toBe(3);
    expect(given).toEqual([[2, 1]]);
    expect(got.map((d) => Buffer.from(d.item.payload).toString())).toEqual(["a", "b", "c"]);
    // Given back uncounted: each is its item's first delivery still.
    expect(got.map((d) => d.deliveryCount)).toEqual([1, 1, 1]);
    expect(await t.redis.plain.llen(config.name)).toBe(0);
    dispatcher.close();
  });
});
