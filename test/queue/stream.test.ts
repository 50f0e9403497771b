/** STREAM queues (issue 16): declaration, XADD enqueue, leasing by consumer group, settles and fencing. */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { QueueList, QueueMode, type QueueSchema } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { startSwitchyard, useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

/** The group's XINFO GROUPS record as a map. */
async function groupInfo(key: string, group: string): Promise<Map<string, unknown> | undefined> {
  const groups = (await t.redis.plain.xinfo("GROUPS", key)) as unknown[][];
  for (const flat of groups) {
    const m = new Map<string, unknown>();
    for (let i = 0; i < flat.length; i += 2) m.set(String(flat[i]), flat[i + 1]);
    if (m.get("name") === group) return m;
  }
  return undefined;
}

/** XPENDING's record of one entry: [id, consumer, idle, count]. */
async function pendingOf(key: string, group: string, id: string): Promise<[string, string, number, number] | undefined> {
  return ((await t.redis.plain.xpending(key, group, id, id, 1)) as [string, string, number, number][])[0];
}

describe("declaring a STREAM queue", () => {
  it("puts the default dead-letter list of a stream without a hash tag in the stream's slot", async () => {
    expect((await t.sy.client.createQueue({ name: "uploads", mode: QueueMode.STREAM })).deadLetterList).toBe("{uploads}.dead");
  });

  it("creates its groups at their start ids (MKSTREAM) and keeps the policy", async () => {
    const Q = "{decl}";
    await t.redis.plain.del(Q);
    const q = await t.sy.client.createQueue({
      name: Q, mode: QueueMode.STREAM, groups: [{ name: "a" }, { name: "b", startId: "0" }],
      streamTrim: { maxLen: 1000n }, minIdle: durationFromMs(30_000), maxDeliveries: 3,
    });
    expect(q).toMatchObject({ mode: QueueMode.STREAM, maxDeliveries: 3, deadLetterList: `${Q}.dead`, groups: [{ name: "a" }, { name: "b" }] });
    expect(q.streamTrim?.maxLen).toBe(1000n);
    expect(await t.redis.plain.type(Q)).toBe("stream");
    expect((await groupInfo(Q, "a"))?.get("last-delivered-id")).toBe("0-0");
    // Declaring it again changes nothing, and leaves the groups where they are.
    await t.sy.client.createQueue({
      name: Q, mode: QueueMode.STREAM, groups: [{ name: "a" }, { name: "b", startId: "0" }],
      streamTrim: { maxLen: 1000n }, minIdle: durationFromMs(30_000), maxDeliveries: 3,
    });
  });

  it("refuses list options, both trim limits, a bad start id, a dead-letter list in another slot, and a key of another type", async () => {
    const bad = [
      [{ name: "{s1}", mode: QueueMode.STREAM, processingList: "{s1}.p" }, "processing_list applies to RELIABLE queues only"],
      [{ name: "{s1}", mode: QueueMode.STREAM, streamTrim: { maxLen: 5n, maxAge: durationFromMs(1000) } }, "not both"],
      [{ name: "{s1}", mode: QueueMode.STREAM, groups: [{ name: "g", startId: "soon" }] }, "start_id \"soon\""],
      // Digits Redis cannot hold (an id's parts are 64-bit): refused here, not declared with a group Redis refuses.
      [{ name: "{s1}", mode: QueueMode.STREAM, groups: [{ name: "g", startId: "99999999999999999999" }] }, "start_id \"99999999999999999999\""],
      [{ name: "{s1}", mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "g" }] }, "named twice"],
      [{ name: "{s1}", mode: QueueMode.STREAM, deadLetterList: "elsewhere" }, 'must share the stream\'s slot: use "{s1}.dead"'],
      [{ name: "{s1}", mode: QueueMode.RELIABLE, groups: [{ name: "g" }] }, "groups applies to STREAM queues only"],
    ] satisfies [MessageInitShape<typeof QueueSchema>, string][];
    for (const [queue, message] of bad) {
      await expect(t.sy.client.createQueue(queue)).rejects.toMatchObject({ code: 3, details: expect.stringContaining(message) });
    }
    await expect(t.sy.client.getQueue("{s1}")).rejects.toMatchObject({ code: 5 });
    await t.redis.plain.lpush("{wrong}", "x");
    await expect(t.sy.client.createQueue({ name: "{wrong}", mode: QueueMode.STREAM })).rejects.toMatchObject({ code: 9, details: expect.stringContaining("holds a list") });
  });
});

describe("enqueue onto a STREAM queue", () => {
  it("appends with XADD, answers the entry ids, keeps payload and headers as fields and trims by policy", async () => {
    const Q = "{uploads-enq}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: 10n } });
    const ids = await t.sy.client.enqueue(Q, [{ payload: Buffer.from("a.png"), headers: { user: "7" } }, "b.png"]);
    expect(ids).toHaveLength(2);
    expect(ids[0]).toMatch(/^\d+-\d+$/);
    const entries = await t.redis.plain.xrange(Q, "-", "+");
    expect(entries).toEqual([[ids[0], ["payload", "a.png", "user", "7"]], [ids[1], ["payload", "b.png"]]]);
    // Trimming is approximate (whole macro nodes): far more than the limit leaves about the limit.
    await t.sy.client.enqueue(Q, Array.from({ length: 500 }, (_, i) => `x${i}`));
    expect(await t.redis.plain.xlen(Q)).toBeLessThan(200);
    await expect(t.sy.client.enqueue(Q, [{ payload: Buffer.from("x"), delayMs: 1000 }])).rejects.toMatchObject({ code: 3 });
    await expect(t.sy.client.enqueue(Q, [{ payload: Buffer.from("x"), headers: { payload: "y" } }])).rejects.toMatchObject({ code: 3 });
  });
});

describe("a stream that expired (its publish TTL) or was deleted", () => {
  it("gets its groups again at the start: the entries appended since are delivered, not skipped", async () => {
    const Q = "{expired}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "h" }] });
    const g = t.sy.client.lease(Q, 5, { group: "g" });
    await t.sy.client.enqueue(Q, ["before"]);
    const [before] = await g.take(1);
    await t.sy.client.ack(before.leaseToken);
    await t.redis.plain.pexpire(Q, 1); // as a publish TTL ends with nobody appending
    await expect.poll(() => t.redis.plain.exists(Q)).toBe(0);
    const raw = (await t.redis.plain.xadd(Q, "*", "payload", "plain producer"))!;
    const [mine] = await t.sy.client.enqueue(Q, ["switchyard"]);
    expect((await g.take(2)).map((d) => d.id)).toEqual([raw, mine]);
    const h = t.sy.client.lease(Q, 5, { group: "h" });
    expect((await h.take(2)).map((d) => d.id)).toEqual([raw, mine]);
    await Promise.all([g.close(), h.close()]);
  });

  it("gets them at the start too when declared again before any lease call (an instance starting with its config file)", async () => {
    const Q = "{expired-redeclared}";
    const spec = { name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] };
    await t.sy.client.createQueue(spec);
    await t.redis.plain.pexpire(Q, 1);
    await expect.poll(() => t.redis.plain.exists(Q)).toBe(0);
    const raw = (await t.redis.plain.xadd(Q, "*", "payload", "appended after the expiry"))!;
    await t.sy.client.createQueue(spec);
    const g = t.sy.client.lease(Q, 1, { group: "g" });
    const [d] = await g.take(1);
    expect(d.id).toBe(raw);
    await t.sy.client.ack(d.leaseToken);
    await g.close();
  });
});

describe("a stream key replaced by another type", () => {
  it("answers FAILED_PRECONDITION naming the key to stats and the group calls, not INTERNAL", async () => {
    const Q = "{replaced}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "h" }] });
    await t.redis.plain.del(Q);
    await t.redis.plain.lpush(Q, "x");
    const calls = [
      () => t.sy.client.getQueueStats(Q), () => t.sy.client.setConsumerGroupPosition(Q, "g", "0"),
      () => t.sy.client.deleteConsumerGroup(Q, "h"), () => t.sy.client.createConsumerGroup(Q, "i"),
    ];
    for (const call of calls) await expect(call()).rejects.toMatchObject({ code: 9, details: expect.stringContaining(`key "${Q}" is not a stream`) });
    await t.redis.plain.del(Q);
  });
});

describe("trimming entries still pending", () => {
  it("claims no dead letter for an entry trimmed while its delivery was held: there is nothing left to keep", async () => {
    const Q = "{trim-pending}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: 10n }, maxDeliveries: 1 });
    const [id] = await t.sy.client.enqueue(Q, ["held"]);
    const lease = t.sy.client.lease(Q, 1, { group: "g" });
    const [held] = await lease.take(1);
    await t.sy.client.enqueue(Q, Array.from({ length: 300 }, (_, i) => `x${i}`));
    expect(await t.redis.plain.xrange(Q, id, id)).toEqual([]);
    expect((await t.sy.client.retry(held.leaseToken, { reason: "too late" })).deadLettered).toBe(false);
    expect(await t.redis.plain.llen(`${Q}.dead`)).toBe(0);
    expect(await pendingOf(Q, "g", id)).toBeUndefined();
    expect(await t.redis.plain.hkeys(`${Q}.leases`)).not.toContain(`f:g:${id}`);
    await lease.close();
  });
});

describe("leasing a STREAM queue", () => {
  it("delivers plain XADD entries and Switchyard's to a group; ack is XACK", async () => {
    const Q = "{lease-basic}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const raw = (await t.redis.plain.xadd(Q, "*", "payload", "raw", "kind", "plain"))!;
    const [mine] = await t.sy.client.enqueue(Q, [{ payload: Buffer.from("mine"), headers: { h: "1" } }]);
    const lease = t.sy.client.lease(Q, 10, { group: "g" });
    expect((await lease.opened).mode).toBe(QueueMode.STREAM);
    const [a, b] = await lease.take(2);
    expect([a.id, Buffer.from(a.payload).toString(), a.headers, a.deliveryCount]).toEqual([raw, "raw", { kind: "plain" }, 1]);
    expect([b.id, Buffer.from(b.payload).toString(), b.headers]).toEqual([mine, "mine", { h: "1" }]);
    expect(Number(a.enqueueTime?.seconds)).toBe(Math.floor(Number(raw.split("-")[0]) / 1000));
    expect(b.fence).toBeGreaterThan(a.fence);
    expect((await pendingOf(Q, "g", raw))?.[3]).toBe(1);
    await t.sy.client.ack(a.leaseToken);
    lease.ack(b.leaseToken);
    await expect.poll(async () => (await groupInfo(Q, "g"))?.get("pending")).toBe(0);
    // A second ack of the same token: no longer held.
    await expect(t.sy.client.ack(a.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("no longer held") });
    // A token naming a group that is not there (forged, or deleted since) holds nothing either.
    const forged = a.leaseToken.replace(/\.[A-Za-z0-9_-]+\.([A-Za-z0-9_-]+)$/, `.${Buffer.from("nope").toString("base64url")}.$1`);
    await expect(t.sy.client.ack(forged)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("no longer held") });
    await lease.close();
  });

  it("refuses an open without a group, with an unknown group, and a group on a list queue", async () => {
    const Q = "{lease-open}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    await expect(t.sy.client.lease(Q, 1).opened).rejects.toMatchObject({ code: 3, details: expect.stringContaining("consumer group") });
    await expect(t.sy.client.lease(Q, 1, { group: "nope" }).opened).rejects.toMatchObject({ code: 5, details: expect.stringContaining('no consumer group "nope"') });
    await t.sy.client.createQueue({ name: "{list}", mode: QueueMode.RELIABLE });
    await expect(t.sy.client.lease("{list}", 1, { group: "g" }).opened).rejects.toMatchObject({ code: 3 });
  });

  it("retry hands the entry back with a grown count and its reason; drop acks; extend keeps the count", async () => {
    const Q = "{lease-retry}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], maxDeliveries: 2 });
    const [id, other] = await t.sy.client.enqueue(Q, ["flaky", "dropped"]);
    const lease = t.sy.client.lease(Q, 1, { group: "g" });
    const [first] = await lease.take(1);
    expect(first.id).toBe(id);
    const extended = await t.sy.client.extendLease(first.leaseToken);
    expect(extended.expireTime).toBeDefined();
    expect((await pendingOf(Q, "g", id))?.[3]).toBe(1);
    const retried = await t.sy.client.retry(first.leaseToken, { reason: "disk full" });
    expect(retried.deadLettered).toBe(false);
    // The old token no longer holds the entry.
    await expect(t.sy.client.ack(first.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
    const [second] = await lease.take(1);
    expect([second.id, second.deliveryCount, second.lastError]).toEqual([id, 2, "disk full"]);
    // The second failure is the last (max_deliveries 2): a dead letter with its history, acked in the group.
    expect((await t.sy.client.retry(second.leaseToken, { reason: "still full" })).deadLettered).toBe(true);
    const [dead] = await t.redis.plain.lrangeBuffer(`${Q}.dead`, 0, -1);
    expect(decodeItem(dead)).toMatchObject({ id, deliveries: 2, lastError: "still full" });
    expect(Buffer.from(decodeItem(dead).payload).toString()).toBe("flaky");
    const peeked = await t.sy.client.peekQueue(Q, QueueList.DEAD_LETTER);
    expect(peeked.items.map((i) => [i.id, i.deliveryCount, i.lastError])).toEqual([[id, 2, "still full"]]);
    // The ready list, purge and requeue are list operations: refused on a stream, with what it is.
    for (const call of [() => t.sy.client.peekQueue(Q, QueueList.READY), () => t.sy.client.purgeQueue(Q)]) {
      await expect(call()).rejects.toMatchObject({ code: 9, details: expect.stringContaining("STREAM queue") });
    }
    const [third] = await lease.take(1);
    expect(third.id).toBe(other);
    await t.sy.client.drop(third.leaseToken, "not wanted");
    expect((await groupInfo(Q, "g"))?.get("pending")).toBe(0);
    const stats = await t.sy.client.getQueueStats(Q);
    expect(stats).toMatchObject({ deadLetter: 1n, completedTotal: 1n, processing: 0n });
    expect(stats.groups).toMatchObject([{ name: "g", pending: 0n, lag: 0n, consumers: 2, lastDeliveredId: other }]);
    // Requeued, the dead letter is a new entry of the stream (a new id), with its headers, delivered afresh.
    expect(await t.sy.client.requeueDeadLetters(Q, { ids: [id] })).toBe(1);
    const [requeued] = await lease.take(1);
    expect([Buffer.from(requeued.payload).toString(), requeued.deliveryCount, requeued.lastError]).toEqual(["flaky", 1, ""]);
    expect(requeued.id).not.toBe(id);
    await t.sy.client.ack(requeued.leaseToken);
    expect(await t.sy.client.deleteDeadLetters(Q, "all")).toBe(0);
    await lease.close();
  });

  it("hands a closed stream's entries back at once, delivered again with a grown count", async () => {
    const Q = "{lease-close}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const ids = await t.sy.client.enqueue(Q, ["1", "2", "3"]);
    const first = t.sy.client.lease(Q, 3, { group: "g" });
    const held = await first.take(3);
    await first.close();
    const second = t.sy.client.lease(Q, 3, { group: "g" });
    const again = await second.take(3);
    expect(again.map((d) => d.id).sort()).toEqual([...ids].sort());
    expect(again.map((d) => d.deliveryCount)).toEqual([2, 2, 2]);
    await expect(t.sy.client.ack(held[0].leaseToken)).rejects.toMatchObject({ code: 9 });
    await Promise.all(again.map((d) => t.sy.client.ack(d.leaseToken)));
    expect((await groupInfo(Q, "g"))?.get("pending")).toBe(0);
    await second.close();
  });
});

describe("an instance that stops", () => {
  it("hands back what its streams hold and leaves the group; the next instance delivers the entries again", async () => {
    const Q = "{leaving}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const ids = await t.sy.client.enqueue(Q, ["1", "2"]);
    const other = await startSwitchyard(t.redis);
    const consumer = other.app.queues.instances.id;
    const lease = other.client.lease(Q, 2, { group: "g" });
    await lease.take(2);
    const consumers = async () => ((await t.redis.plain.xinfo("CONSUMERS", Q, "g")) as unknown[][]).map((c) => String(c[1]));
    expect(await consumers()).toContain(consumer);
    await other.stop();
    expect(await consumers()).not.toContain(consumer);
    const again = t.sy.client.lease(Q, 2, { group: "g" });
    const back = await again.take(2);
    expect(back.map((d) => [d.id, d.deliveryCount])).toEqual(ids.map((id) => [id, 2]));
    await Promise.all(back.map((d) => t.sy.client.ack(d.leaseToken)));
    await again.close();
  });
});

describe("UpdateQueue on a stream queue", () => {
  it("changes the trim policy and min_idle, keeps the groups, and refuses the mode", async () => {
    const Q = "{upd}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }] });
    const updated = await t.sy.client.updateQueue({ name: Q, streamTrim: { maxLen: 50n }, minIdle: durationFromMs(5000) }, ["stream_trim", "min_idle"]);
    expect(updated).toMatchObject({ groups: [{ name: "g" }], minIdle: { seconds: 5n } });
    expect(updated.streamTrim?.maxLen).toBe(50n);
    await expect(t.sy.client.updateQueue({ name: Q, mode: QueueMode.RELIABLE }, ["mode"])).rejects.toMatchObject({ code: 9 });
  });
});
