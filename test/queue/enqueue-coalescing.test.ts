/**
 * Enqueues to one queue that arrive in the same event-loop turn share one
 * push (src/queue/push-batcher.ts). Each call must still land exactly
 * once, in its own order, with its own ids, and a refused call must not touch
 * the others.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const MAX_ITEMS = 5;
const t = useSwitchyard({ config: { maxItemsPerEnqueue: MAX_ITEMS, maxPayloadBytes: 64 } });

/** A queue's items, oldest (next to leave) first, as payload text and id. */
async function contents(queue: string): Promise<{ payload: string; id: string }[]> {
  const values = await t.redis.plain.lrangeBuffer(queue, 0, -1);
  return values.reverse().map((v) => {
    const item = decodeItem(v);
    return { payload: Buffer.from(item.payload).toString(), id: item.id };
  });
}

/** Pushes Redis has run so far: LPUSH, or push.lua (EVAL) for pushes with a ttl. */
async function pushCalls(key: string): Promise<number> {
  const stats = (await t.redis.nodeFor(key).info("commandstats")) as string;
  return [...stats.matchAll(/^cmdstat_(?:lpush|evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

async function declare(...names: string[]): Promise<void> {
  for (const name of names) await t.sy.client.createQueue({ name, mode: QueueMode.RELIABLE });
}

const statusOf = (p: Promise<unknown>) => p.then(() => grpc.status.OK, (err: grpc.ServiceError) => err.code);

describe("enqueue coalescing", () => {
  it("lands every item of concurrent calls to several queues once, each call in order, with its ids", async () => {
    const queues = ["{co-a}", "{co-b}", "{co-c}"];
    await declare(...queues);
    const calls = Array.from({ length: 90 }, (_, c) => ({
      queue: queues[c % 3],
      payloads: Array.from({ length: 1 + (c % MAX_ITEMS) }, (_, i) => `${c}:${i}`),
    }));
    const ids = await Promise.all(calls.map((call) => t.sy.client.enqueue(call.queue, call.payloads)));

    for (const queue of queues) {
      const stored = await contents(queue);
      const mine = calls.map((call, c) => ({ call, c })).filter(({ call }) => call.queue === queue);
      expect(stored.length).toBe(mine.reduce((n, { call }) => n + call.payloads.length, 0));
      for (const { call, c } of mine) {
        // This call's items, in the order they sit in the queue, are its payloads in order, with its ids.
        const ofCall = stored.filter((s) => s.payload.startsWith(`${c}:`));
        expect(ofCall).toEqual(call.payloads.map((payload, i) => ({ payload, id: ids[c][i] })));
      }
    }
  });

  it("pushes the first call to an idle queue at once and the rest of its turn with one push, never more than an Enqueue's item limit", async () => {
    await declare("{co-one}", "{co-cap}");
    const { queues } = t.sy.app;
    const item = (s: string) => ({ payload: Buffer.from(s) });

    const before = await pushCalls("{co-one}");
    await Promise.all([
      queues.enqueue("{co-one}", [item("a")]),
      queues.enqueue("{co-one}", [item("b"), item("c")]),
      queues.enqueue("{co-one}", [item("d")]),
    ]);
    expect((await pushCalls("{co-one}")) - before).toBe(2);
    expect((await contents("{co-one}")).map((s) => s.payload)).toEqual(["a", "b", "c", "d"]);

    // 3 + 3 items exceed MAX_ITEMS (5): each call goes in a push of its own.
    const beforeCap = await pushCalls("{co-cap}");
    await Promise.all(["p", "q", "r"].map((k) => queues.enqueue("{co-cap}", [item(`${k}1`), item(`${k}2`), item(`${k}3`)])));
    expect((await pushCalls("{co-cap}")) - beforeCap).toBe(3);
    expect((await contents("{co-cap}")).map((s) => s.payload)).toEqual(["p1", "p2", "p3", "q1", "q2", "q3", "r1", "r2", "r3"]);
  });

  it("leaves the expiry the calls would have left one by one: the last non-zero ttl", async () => {
    await declare("{co-ttl}", "{co-nottl}");
    const { queues } = t.sy.app;
    const item = { payload: Buffer.from("x") };
    await Promise.all([queues.enqueue("{co-ttl}", [item], 600_000), queues.enqueue("{co-ttl}", [item], 60_000), queues.enqueue("{co-ttl}", [item], 0)]);
    const pttl = await t.redis.plain.pttl("{co-ttl}");
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(60_000);
    await Promise.all([queues.enqueue("{co-nottl}", [item]), queues.enqueue("{co-nottl}", [item])]);
    expect(await t.redis.plain.pttl("{co-nottl}")).toBe(-1);
  });

  it("refuses a bad call among good ones with its own status, and lands the good ones", async () => {
    await declare("{co-mixed}");
    const c = t.sy.client;
    const outcomes = await Promise.all([
      statusOf(c.enqueue("{co-mixed}", ["good-1"])),
      statusOf(c.enqueue("{co-mixed}", [])),
      statusOf(c.enqueue("{co-mixed}", ["good-2", "good-3"])),
      statusOf(c.enqueue("{co-mixed}", ["x".repeat(65)])),
      statusOf(c.enqueue("{co-undeclared}", ["lost"])),
      statusOf(c.enqueue("{co-mixed}", Array.from({ length: MAX_ITEMS + 1 }, () => "too many"))),
      statusOf(c.enqueue("{co-mixed}", ["good-4"])),
    ]);
    expect(outcomes).toEqual([
      grpc.status.OK,
      grpc.status.INVALID_ARGUMENT,
      grpc.status.OK,
      grpc.status.RESOURCE_EXHAUSTED,
      grpc.status.NOT_FOUND,
      grpc.status.INVALID_ARGUMENT,
      grpc.status.OK,
    ]);
    expect((await contents("{co-mixed}")).map((s) => s.payload).sort()).toEqual(["good-1", "good-2", "good-3", "good-4"]);
    expect(await t.redis.plain.exists("{co-undeclared}")).toBe(0);
  });

  it("fails every call of a push onto a key that is not a list, as each would have failed alone", async () => {
    await declare("{co-wrong}");
    await t.redis.plain.set("{co-wrong}", "a string");
    const outcomes = await Promise.all([statusOf(t.sy.client.enqueue("{co-wrong}", ["a"])), statusOf(t.sy.client.enqueue("{co-wrong}", ["b"]))]);
    expect(outcomes).toEqual([grpc.status.FAILED_PRECONDITION, grpc.status.FAILED_PRECONDITION]);
    expect(await t.redis.plain.get("{co-wrong}")).toBe("a string");
  });
});

describe("large enqueues", () => {
  const big = useSwitchyard();

  it("pushes 10,000 items in one call, and two concurrent calls of 6,000 coalesced, in order", async () => {
    await big.sy.client.createQueue({ name: "{co-big}", mode: QueueMode.RELIABLE });
    const { queues } = big.sy.app;
    const items = (tag: string, n: number) => Array.from({ length: n }, (_, i) => ({ payload: Buffer.from(`${tag}${i}`) }));
    await queues.enqueue("{co-big}", items("a", 10_000));
    await Promise.all([queues.enqueue("{co-big}", items("b", 6000)), queues.enqueue("{co-big}", items("c", 6000))]);
    const stored = (await big.redis.plain.lrangeBuffer("{co-big}", 0, -1)).reverse().map((v) => Buffer.from(decodeItem(v).payload).toString());
    expect(stored).toEqual([...items("a", 10_000), ...items("b", 6000), ...items("c", 6000)].map((i) => i.payload.toString()));
  });
});
