/**
 * Review of STREAM queues (issue 16): defects found by attacking the stream
 * mode against a real Redis and the real gRPC server (keys of another type
 * written by another client, a raw producer's non-UTF-8 fields, a min_idle
 * past 1970, an entry trimmed while held). Each test failed on da19473.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { createLogger } from "../../src/log.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const warnings: { msg?: string; err?: { message?: string } }[] = [];
const t = useSwitchyard({ log: createLogger("warn", (line) => warnings.push(JSON.parse(line) as (typeof warnings)[number])) });

/** XPENDING's records of a group: [id, consumer, idle, count]. */
const pending = async (q: string, g: string) => (await t.redis.plain.xpending(q, g, "-", "+", 100)) as [string, string, number, number][];
const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));
/** `p`, or "nothing" if it has not resolved within `ms`. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => "nothing" as const)]);

describe("a STREAM queue's key of another type (a stray write by another client)", () => {
  it.each([
    ["is not a string", "hash", "holds a hash, not a string"],
    ["holds a string that is no integer", "junk", "holds a string, not an integer"],
  ])("moves no entry into the group's pending list while its fence counter %s, and delivers it (count 1) once fixed", async (_, stray, named) => {
    const q = `{r16-fence-${stray}}`;
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(60_000) });
    if (stray === "hash") await t.redis.plain.hset(`${q}.fence`, "not", "a counter");
    else await t.redis.plain.set(`${q}.fence`, "junk");
    const [id] = await t.sy.client.enqueue(q, ["a"]);
    const seen = warnings.length;
    const lease = t.sy.client.lease(q, 1, { group: "g" });
    const failed = () => warnings.slice(seen).find((w) => w.msg === "lease pump failed; retrying");
    await expect.poll(() => failed() !== undefined).toBe(true);
    // As for list queues (test/queue/wrong-key-type.test.ts): nothing moved without its record, and the key named.
    expect(await pending(q, "g")).toEqual([]);
    expect(failed()?.err?.message).toContain(`key "${q}.fence" ${named}`);
    await t.redis.plain.del(`${q}.fence`);
    const got = await within(lease.take(1), 5000);
    expect(got === "nothing" ? "nothing" : got.map((d) => [d.id, d.deliveryCount])).toEqual([[id, 1]]);
    lease.cancel();
  });

  it("refuses an ack while its counts hash is not a hash, naming the key, and applies it once the key is fixed", async () => {
    const q = "{r16-leases}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const [id] = await t.sy.client.enqueue(q, ["a"]);
    const lease = t.sy.client.lease(q, 1, { group: "g" });
    const [d] = await lease.take(1);
    const counts = await t.redis.plain.hgetall(`${q}.leases`);
    await t.redis.plain.del(`${q}.leases`);
    await t.redis.plain.set(`${q}.leases`, "stray");
    await expect(t.sy.client.ack(d.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining(`key "${q}.leases" holds a string, not a hash`) });
    expect((await pending(q, "g")).map(([entry]) => entry)).toEqual([id]);
    await t.redis.plain.del(`${q}.leases`);
    await t.redis.plain.hset(`${q}.leases`, counts);
    await t.sy.client.ack(d.leaseToken);
    expect(await pending(q, "g")).toEqual([]);
    lease.cancel();
  });

  it("counts no delivery that never happened while its dead-letter list is not a list", async () => {
    const q = "{r16-dead}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(300), maxDeliveries: 1 });
    const [id] = await t.sy.client.enqueue(q, ["poison"]);
    const first = t.sy.client.lease(q, 1, { group: "g" });
    await first.take(1); // its one and only delivery
    await t.redis.plain.set(`${q}.dead`, "stray");
    await first.close(); // handed back: its next reclaim is past max_deliveries, a dead letter
    const seen = warnings.length;
    const second = t.sy.client.lease(q, 1, { group: "g" });
    // Its reclaims are refused, naming the key, until the key is fixed: none counts a delivery.
    const refused = () => warnings.slice(seen).filter((w) => w.err?.message?.includes(`key "${q}.dead" holds a string, not a list`)).length;
    await expect.poll(refused, { timeout: 5000 }).toBeGreaterThanOrEqual(2);
    expect((await pending(q, "g")).map(([, , , count]) => count)).toEqual([1]);
    await t.redis.plain.del(`${q}.dead`);
    await expect.poll(() => t.redis.plain.llen(`${q}.dead`), { timeout: 5000 }).toBe(1);
    const [dead] = await t.redis.plain.lrangeBuffer(`${q}.dead`, 0, -1);
    // Delivered to a worker once: its history says 1, as without the stray key.
    expect([decodeItem(dead).id, decodeItem(dead).deliveries]).toEqual([id, 1]);
    second.cancel();
  });
});

describe("a raw producer's entry with a field that is not UTF-8", () => {
  it("is a dead letter that PeekQueue shows with its id, and that DeleteDeadLetters finds by that id", async () => {
    const q = "{r16-binary}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }], maxDeliveries: 1 });
    const id = (await t.redis.plain.xadd(q, "*", "payload", "A", "sig", Buffer.from([0xff, 0x00, 0x80])))!;
    const lease = t.sy.client.lease(q, 1, { group: "g" });
    const [d] = await lease.take(1);
    expect((await t.sy.client.retry(d.leaseToken, { reason: "bad" })).deadLettered).toBe(true);
    const peeked = await t.sy.client.peekQueue(q, QueueList.DEAD_LETTER);
    expect(peeked.items.map((i) => [i.id, Buffer.from(i.payload).toString(), i.lastError])).toEqual([[id, "A", "bad"]]);
    // Its header as the worker had it: the bytes that are not UTF-8 read as U+FFFD.
    const sig = Buffer.from([0xff, 0x00, 0x80]).toString();
    expect([d.headers.sig, peeked.items[0].headers.sig]).toEqual([sig, sig]);
    expect(await t.sy.client.deleteDeadLetters(q, { ids: [id] })).toBe(1);
    lease.cancel();
  });
});

describe("min_idle longer than the time since 1970", () => {
  it("is refused; the longest allowed still brings a retry due at once back at once", async () => {
    // XCLAIM … IDLE <min_idle> past 1970 is taken by Redis as idle 0: an entry given back would wait min_idle.
    const century = { seconds: 100n * 365n * 86_400n, nanos: 0 };
    await expect(t.sy.client.createQueue({ name: "{r16-century}", mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: century }))
      .rejects.toMatchObject({ code: 3, details: expect.stringContaining("min_idle must be at most 10 years") });
    const q = "{r16-min-idle}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: { seconds: 10n * 365n * 86_400n, nanos: 0 } });
    await expect(t.sy.client.updateQueue({ name: q, minIdle: century }, ["min_idle"])).rejects.toMatchObject({ code: 3 });
    const [id] = await t.sy.client.enqueue(q, ["a"]);
    const lease = t.sy.client.lease(q, 1, { group: "g" });
    const [d] = await lease.take(1);
    expect((await t.sy.client.retry(d.leaseToken, { delayMs: 0 })).deadLettered).toBe(false);
    const again = await within(lease.take(1), 5000);
    expect(again === "nothing" ? "nothing" : again.map((x) => [x.id, x.deliveryCount])).toEqual([[id, 2]]);
    lease.cancel();
  });
});

describe("an entry trimmed away while its delivery is held", () => {
  it("refuses an extend (nothing is held any more) and leaves no fence record behind", async () => {
    const q = "{r16-trimmed}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: 10n } });
    const [id] = await t.sy.client.enqueue(q, ["held"]);
    const lease = t.sy.client.lease(q, 1, { group: "g" });
    const [d] = await lease.take(1);
    await t.sy.client.enqueue(q, Array.from({ length: 300 }, (_, i) => `x${i}`));
    expect(await t.redis.plain.xrange(q, id, id)).toEqual([]);
    await expect(t.sy.client.extendLease(d.leaseToken)).rejects.toMatchObject({ code: 9 });
    expect(await t.redis.plain.hkeys(`${q}.leases`)).not.toContain(`f:g:${id}`);
    lease.cancel();
  });
});
