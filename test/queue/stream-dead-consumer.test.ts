/**
 * STREAM queues (issue 16): a crashed instance's consumer leaves its groups.
 * A stopping instance retires its consumer itself; a crashed one cannot, and
 * if it held nothing no reclaim ever finds it either. The watchdog that returns
 * a dead instance's list deliveries retires its consumer from every group
 * (one holding entries stays until they are reclaimed, so none is forgotten).
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { loadConfig } from "../../src/config.js";
import { systemKeys } from "../../src/redis/keys.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
/** The test instance's namespace and instance timeout: the defaults. */
const { namespace, instanceTimeoutMs } = loadConfig({});

/** The consumers of `group` on `stream`, each with the entries it holds. */
async function consumers(stream: string, group: string): Promise<Record<string, number>> {
  const rows = (await t.redis.plain.xinfo("CONSUMERS", stream, group)) as unknown[][];
  return Object.fromEntries(rows.map((r) => [String(r[1]), Number(r[3])]));
}

describe("a crashed instance's stream consumers", () => {
  it("are retired by the watchdog once the instance counts as dead, unless they still hold entries", async () => {
    const Q = "{dead-consumers}";
    const clock = t.sy.clock as ManualClock;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }, { name: "h", startId: "0" }], minIdle: durationFromMs(60_000) });
    await t.sy.client.enqueue(Q, ["a", "b"]);
    // What two crashed instances left: "idlecrash1" read "a" in both groups and acked it; "holdcrash1" holds "b" in g.
    const plain = t.redis.plain;
    for (const g of ["g", "h"]) {
      const [[, [[id]]]] = (await plain.xreadgroup("GROUP", g, "idlecrash1", "COUNT", 1, "STREAMS", Q, ">")) as [string, [string, string[]][]][];
      await plain.xack(Q, g, id);
    }
    await plain.xreadgroup("GROUP", "g", "holdcrash1", "COUNT", 1, "STREAMS", Q, ">");
    const alive = systemKeys(namespace).alive;
    await plain.zadd(alive, clock.now() - 1, "idlecrash1", clock.now() - 1, "holdcrash1");
    expect(await consumers(Q, "g")).toEqual({ idlecrash1: 0, holdcrash1: 1 });
    expect(await consumers(Q, "h")).toEqual({ idlecrash1: 0 });

    await clock.advance(instanceTimeoutMs + 1);
    await t.sy.app.queues.watchdog.pass();
    expect(await consumers(Q, "g")).toEqual({ holdcrash1: 1 });
    expect(await consumers(Q, "h")).toEqual({});
    const stats = new Map((await t.sy.client.getQueueStats(Q)).groups.map((g) => [g.name, g]));
    expect([stats.get("g")?.consumers, stats.get("g")?.pending, stats.get("h")?.consumers]).toEqual([1, 1n, 0]);
  });
});
