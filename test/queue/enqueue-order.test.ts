/**
 * Enqueues to one queue reach Redis in the order they were made, also while
 * this instance reads the queue's declaration for the first time: a call made
 * while the read is out waits for it and goes on after the calls before it,
 * and so does a call made by code that itself waited for that read (an
 * embedder that looks the queue up, then enqueues), though the declaration is
 * in the cache by then. A call made once the read's callers have gone on is
 * prepared and pushed at once (QueueRegistry.ready, Queues.prepare).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { decodeItem } from "../../src/queue/envelope.js";
import { systemKeys } from "../../src/redis/keys.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: TestRedis;
let here: TestSwitchyard;
let elsewhere: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  here = await startSwitchyard(redis, { env: { SWITCHYARD_NAMESPACE: "here" } });
  elsewhere = await startSwitchyard(redis, { env: { SWITCHYARD_NAMESPACE: "elsewhere" } });
});
afterAll(async () => {
  await here?.stop();
  await elsewhere?.stop();
  await redis?.stop();
});

/**
 * A reliable queue declared behind `here`'s back (as another instance's write whose event has not
 * come): not in its cache. Its `enqueue` pushes one item through `here` and notes it in `made`.
 */
async function unseenQueue(name: string) {
  const config = await elsewhere.app.queues.registry.create({ name, mode: "reliable" });
  const key = systemKeys("here").queues;
  await redis.nodeFor(key).hset(key, name, JSON.stringify(config));
  const { queues } = here.app;
  expect(queues.registry.cached(name)).toBeUndefined();
  const made: string[] = [];
  const enqueue = (s: string) => {
    made.push(s);
    return queues.enqueue(name, [{ payload: Buffer.from(s) }]);
  };
  return { queues, made, enqueue };
}

/** The payloads on queue `name`, oldest first. */
async function contents(name: string): Promise<string[]> {
  const values = await redis.nodeFor(name).lrangeBuffer(name, 0, -1);
  return values.reverse().map((v) => Buffer.from(decodeItem(v).payload).toString());
}

it("keeps the call order while the declaration is first read, for a call made by code that waited for that read too", async () => {
  const name = "{order-first-read}";
  const { queues, made, enqueue } = await unseenQueue(name);
  // "d" is enqueued by a caller that first looks the queue up, waiting for the same read as "a",
  // "b" and "c": it is made once the read is back, after them, though its lookup came before "b".
  const lookThenEnqueue = async (s: string) => {
    const config = await queues.registry.get(name);
    if (!config.paused) await enqueue(s);
  };
  await Promise.all([enqueue("a"), lookThenEnqueue("d"), enqueue("b"), enqueue("c")]);
  expect(made).toEqual(["a", "b", "c", "d"]);
  expect(await contents(name)).toEqual(["a", "b", "c", "d"]);

  // Read once: later calls are answered from the cache, in the turn they are made.
  expect(queues.registry.ready(name)?.name).toBe(name);
  await Promise.all(["e", "f", "g"].map(enqueue));
  expect(await contents(name)).toEqual(["a", "b", "c", "d", "e", "f", "g"]);
});

it("keeps the call order for calls made in the read's own reactions, some before and some after a call that waited", async () => {
  const name = "{order-reactions}";
  const { queues, made, enqueue } = await unseenQueue(name);
  const first = enqueue("1");
  const read = queues.registry.get(name);
  const chained = [read.then(() => enqueue("3")), read.then(() => enqueue("4"))];
  const second = enqueue("2");
  await Promise.all([first, second, ...chained]);
  expect(made).toEqual(["1", "2", "3", "4"]);
  expect(await contents(name)).toEqual(["1", "2", "3", "4"]);
});
