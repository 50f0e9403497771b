/**
 * Review of "settle carries the next lease" (131e1c6): a reliable settle frees
 * its stream's credit as it goes out. When Redis refuses it, the delivery is
 * held again; nothing the pump leased meanwhile may then take the stream past
 * its credit (SPEC Q8, Q14: "the server never moves an item for a stream that
 * has no open credit").
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { ManualClock } from "../../src/clock.js";
import type { LeaseStream } from "../../src/queue/lease-stream.js";
import { queueKeys } from "../../src/redis/keys.js";
import { startLink, type Link } from "../helpers/link.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: StandaloneRedis;
let link: Link;
let sy: TestSwitchyard | undefined;

beforeAll(async () => {
  redis = await startStandaloneRedis();
  link = await startLink(redis.socketPath);
});
afterEach(async () => {
  await sy?.stop();
  sy = undefined;
  await redis.flushAll();
});
afterAll(async () => {
  await link?.close();
  await redis?.stop();
});

const streamsOf = (s: TestSwitchyard, q: string) =>
  [...(s.app.queues as unknown as { streams: Set<LeaseStream> }).streams].filter((x) => x.queue === q);
const evals = (requests: readonly string[]) => (requests.join("").match(/\r\neval(sha)?\r\n/gi) ?? []).length;

/**
 * The RESP header ("*<arguments>") of the EVAL or EVALSHA command in `text`, a chunk
 * a client sent: a chunk may carry other commands before it (how writes coalesce on
 * the socket is up to the kernel), so it is found by its command name, not at the start.
 */
function evalHeader(text: string): string {
  const at = text.search(/\*\d+\r\n\$\d+\r\neval(sha)?\r\n/i);
  return at < 0 ? "" : text.slice(at, text.indexOf("\r\n", at));
}

describe("a settle Redis refuses while the pump leases on its own (its queue was empty: no lease rode along)", () => {
  it("leaves its delivery held, and the stream never holds more than its credit", async () => {
    sy = await startSwitchyard(redis, { config: { redis: { kind: "standalone", url: `redis://${link.address}` } } });
    const Q = "{refill-over}";
    const credit = 2;
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["first"]);
    const lease = sy.client.lease(Q, credit);
    const [first] = await lease.take(1);
    const [stream] = streamsOf(sy, Q);
    // Fewer items than credit: the pump now waits for items on its blocking connection, so the settle below carries no lease.
    await new Promise((r) => setTimeout(r, 200));
    const { delayed } = queueKeys(Q, "", "", "");
    await redis.plain.set(delayed, "not a sorted set"); // the retry below is refused (SYWRONGTYPE), changing nothing
    const holding = link.hold((chunk) => {
      const text = chunk.toString("latin1");
      return /\r\neval(sha)?\r\n/i.test(text) && text.includes(delayed);
    });
    const refused = new Promise<number>((ok) => lease.onSettleResult((r) => r.leaseToken === first.leaseToken && ok(r.code)));
    lease.retry(first.leaseToken, { delayMs: 1000 });
    const held = await holding;
    // Another producer pushes meanwhile: the pump wakes and leases, on the command connection, behind the settle.
    await redis.plain.lpush(Q, "second", "third");
    await expect.poll(() => evals(held.requests)).toBe(2);
    held.forward();
    await expect.poll(() => held.replies.includes("SYWRONGTYPE")).toBe(true);
    held.release();
    expect(await refused).not.toBe(0);
    await new Promise((r) => setTimeout(r, 200));
    // The refused retry left "first" with the stream, as it was.
    expect([...stream.held.keys()]).toContain(first.leaseToken);
    // ... so at most one more item may have been moved for it.
    expect(stream.held.size + stream.settling.size).toBeLessThanOrEqual(credit);
    expect(await redis.plain.llen(`${Q}.processing`)).toBeLessThanOrEqual(credit);
    await redis.plain.del(delayed);
    await lease.close();
  });
});

describe("an instance that stops while a settle with a lease beside it is in flight", () => {
  it("does not leave the live instances while that settle's delivery, refused, is still in processing", async () => {
    sy = await startSwitchyard(redis, { config: { redis: { kind: "standalone", url: `redis://${link.address}` } } });
    const Q = "{refill-stop}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["first"]);
    const lease = sy.client.lease(Q, 1);
    const [first] = await lease.take(1);
    const { delayed } = queueKeys(Q, "", "", "");
    await redis.plain.set(delayed, "not a sorted set"); // the retry below is refused (SYWRONGTYPE), and so is giving it back
    const holding = link.hold((chunk) => {
      const text = chunk.toString("latin1");
      return /\r\neval(sha)?\r\n/i.test(text) && text.includes(delayed);
    });
    lease.retry(first.leaseToken, { delayMs: 1000 });
    const held = await holding;
    const queues = sy.app.queues as unknown as {
      stop(graceMs?: number): Promise<void>;
      instances: { id: string; keys: { alive: string } };
      onRelease?: () => void;
    };
    const { id, keys } = queues.instances;
    expect(await redis.plain.zscore(keys.alive, id)).not.toBeNull();
    const listening = queues.onRelease;
    const stopping = queues.stop(1000);
    // stop() has closed the streams and waits for the settle in flight (it listens for its answer).
    await expect.poll(() => queues.onRelease !== listening).toBe(true);
    held.forward();
    await expect.poll(() => held.replies.includes("SYWRONGTYPE")).toBe(true);
    held.release();
    await stopping;
    // "first" is still this instance's delivery in processing, and nothing will return it once the
    // process is gone unless another instance can: this one must still count as live (to be reaped).
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    expect(await redis.plain.zscore(keys.alive, id)).not.toBeNull();
    await redis.plain.del(delayed);
    await lease.close().catch(() => undefined);
  });
});

describe("a settle whose answer is lost after Redis ran it, with the next lease beside it", () => {
  it("acks its item once; the item leased beside it goes back uncounted and reaches the stream, once, with every other", async () => {
    sy = await startSwitchyard(redis, { config: { redis: { kind: "standalone", url: `redis://${link.address}` } } });
    const Q = "{refill-lost}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a", "b", "c"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    const { delayed } = queueKeys(Q, "", "", "");
    let dropped = 0;
    let header = "";
    link.drop = (chunk) => {
      const text = chunk.toString("latin1");
      if (dropped > 0 || !/\r\neval(sha)?\r\n/i.test(text) || !text.includes(delayed)) return false;
      dropped++;
      header = evalHeader(text);
      return true;
    };
    lease.ack(a.leaseToken);
    await expect.poll(() => dropped).toBe(1);
    link.drop = undefined;
    expect(header).toBe("*24"); // settle-lease.lua: the ack and a lease
    // Redis ran it: "a" acked, "b" leased for nobody until this instance reconciles and gives it back, uncounted.
    // "a"'s ack had no answer: the instance looks again once its connection is back (no heartbeat: the clock
    // stands still), finds it settled, and frees the stream's credit for "b".
    const rest = [...(await lease.take(1))];
    lease.ack(rest[0].leaseToken);
    rest.push(...(await lease.take(1)));
    lease.ack(rest[1].leaseToken);
    expect(rest.map((d) => [Buffer.from(d.payload).toString(), d.deliveryCount])).toEqual([["b", 1], ["c", 1]]);
    await expect.poll(async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([0, 0]);
    expect(new Set([a.fence, ...rest.map((d) => d.fence)]).size).toBe(3);
    await lease.close();
  });
});

describe("a stream that closes while its settle, with a lease beside it, is in flight", () => {
  async function setUp(Q: string, ran: boolean) {
    // The closed stream ends once its settle's call times out (its answer held): 1.5 s rather than 5.
    sy = await startSwitchyard(redis, { config: { redis: { kind: "standalone", url: `redis://${link.address}` }, redisCommandTimeoutMs: 1500 } });
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a", "b", "c"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    const { delayed } = queueKeys(Q, "", "", "");
    const holding = link.hold((chunk) => {
      const text = chunk.toString("latin1");
      return /\r\neval(sha)?\r\n/i.test(text) && text.includes(delayed);
    });
    lease.ack(a.leaseToken);
    const held = await holding;
    expect(evalHeader(held.requests[0])).toBe("*24");
    // Redis runs it now (its answer held) or never.
    if (ran) {
      held.forward();
      await expect.poll(() => held.replies.length).toBeGreaterThan(0);
    }
    await lease.close();
    await expect.poll(() => streamsOf(sy!, Q).length).toBe(0);
    return { a, held };
  }
  const payloads = async (Q: string, n: number) => {
    const again = sy!.client.lease(Q, n);
    const got = await again.take(n);
    for (const d of got) again.ack(d.leaseToken);
    await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    await again.close();
    return got.map((d) => [Buffer.from(d.payload).toString(), d.deliveryCount]);
  };

  it("answered: the item is acked, and the item leased for the closed stream goes back uncounted", async () => {
    const Q = "{refill-close}";
    const { held } = await setUp(Q, true);
    held.release();
    await expect.poll(async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([2, 0]);
    expect(await payloads(Q, 2)).toEqual([["b", 1], ["c", 1]]);
  });

  it("unanswered (its connection cut before Redis ran it): the item goes back to the front, counted, as a closed stream's items do", async () => {
    const Q = "{refill-close-cut}";
    await setUp(Q, false);
    link.cut();
    await expect.poll(async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)], { timeout: 10_000 }).toEqual([3, 0]);
    expect(await payloads(Q, 3)).toEqual([["a", 2], ["b", 1], ["c", 1]]);
  });
});

describe("a lease beside settles that Redis refuses after the settles ran (the queue key is of another type)", () => {
  it("does not report the settles it applied as failed, nor keep their deliveries held", async () => {
    sy = await startSwitchyard(redis, { config: { redis: { kind: "standalone", url: `redis://${link.address}` } } });
    const Q = "{refill-queue-type}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    const [stream] = streamsOf(sy, Q);
    await redis.plain.set(Q, "not a list"); // someone else's key, under the queue's name
    const failed: number[] = [];
    lease.onSettleResult((r) => r.leaseToken === a.leaseToken && r.code !== 0 && failed.push(r.code));
    lease.ack(a.leaseToken);
    // The ack applied: "a" is gone from processing ...
    await expect.poll(() => redis.plain.hget(`${Q}.leases`, "completed")).toBe("1");
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
    await new Promise((r) => setTimeout(r, 300));
    // ... so the worker must not be told it failed, and the stream must not count it any more.
    expect(failed).toEqual([]);
    expect(stream.held.size + stream.settling.size).toBe(0);
    await redis.plain.del(Q);
    await lease.close();
  });
});

describe("settles with a lease beside them: dead letters, a paused queue, the same token twice", () => {
  it("a retry reaching max_deliveries dead-letters its item in the same call that leases the next", async () => {
    sy = await startSwitchyard(redis);
    const Q = "{refill-dead}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, maxDeliveries: 1, deadLetterList: `${Q}.dead` });
    await sy.client.enqueue(Q, ["a", "b"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    lease.retry(a.leaseToken);
    const [b] = await lease.take(1);
    expect([Buffer.from(b.payload).toString(), b.deliveryCount]).toEqual(["b", 1]);
    expect(await redis.plain.llen(`${Q}.dead`)).toBe(1);
    lease.ack(b.leaseToken);
    await expect.poll(async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([0, 0]);
    const [stream] = streamsOf(sy, Q);
    expect(stream.held.size + stream.settling.size).toBe(0);
    await lease.close();
  });

  it("a paused queue: an ack leases nothing beside it; resumed, the next item comes", async () => {
    sy = await startSwitchyard(redis);
    const Q = "{refill-paused}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a", "b"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    await sy.client.pauseQueue(Q);
    lease.ack(a.leaseToken);
    await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    await new Promise((r) => setTimeout(r, 200));
    expect(await redis.plain.llen(Q)).toBe(1);
    await sy.client.resumeQueue(Q);
    const [b] = await lease.take(1);
    expect(Buffer.from(b.payload).toString()).toBe("b");
    lease.ack(b.leaseToken);
    await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    await lease.close();
  });

  it("the same token acked twice, on the stream and by a unary Ack, in one turn: acked once, credit freed once", async () => {
    sy = await startSwitchyard(redis);
    const Q = "{refill-twice}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, ["a", "b", "c"]);
    const lease = sy.client.lease(Q, 1);
    const [a] = await lease.take(1);
    const unary = sy.client.ack(a.leaseToken).then(() => "ok", () => "refused");
    lease.ack(a.leaseToken);
    const [b] = await lease.take(1);
    expect(Buffer.from(b.payload).toString()).toBe("b");
    await unary;
    const [stream] = streamsOf(sy, Q);
    await new Promise((r) => setTimeout(r, 200));
    expect(stream.held.size + stream.settling.size).toBe(1);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(1);
    expect(await redis.plain.hget(`${Q}.leases`, "completed")).toBe("1");
    lease.ack(b.leaseToken);
    const [c] = await lease.take(1);
    expect(Buffer.from(c.payload).toString()).toBe("c");
    lease.ack(c.leaseToken);
    await expect.poll(() => redis.plain.llen(`${Q}.processing`)).toBe(0);
    await lease.close();
  });
});
