/** STREAM queues (issue 16): fan-out to groups, replay, group admin, and reclaiming idle entries. */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import type { LeaseSession } from "../../src/client/client.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

/** Takes `n` deliveries and acks each; resolves to their entry ids in delivery order. */
async function takeAndAck(lease: LeaseSession, n: number): Promise<string[]> {
  const got = await lease.take(n);
  await Promise.all(got.map((d) => t.sy.client.ack(d.leaseToken)));
  return got.map((d) => d.id);
}

describe("fan-out and replay", () => {
  it("gives two groups every entry once each; a group created later from 0 replays the history", async () => {
    const Q = "{fanout}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "thumbnailer" }, { name: "indexer" }] });
    const ids = await t.sy.client.enqueue(Q, ["1", "2", "3", "4", "5"]);
    const a = t.sy.client.lease(Q, 10, { group: "thumbnailer" });
    const b = t.sy.client.lease(Q, 10, { group: "indexer" });
    expect(await takeAndAck(a, 5)).toEqual(ids);
    expect(await takeAndAck(b, 5)).toEqual(ids);
    // Nothing more for either: each entry went once to each group.
    const more = await t.sy.client.enqueue(Q, ["6"]);
    expect(await takeAndAck(a, 1)).toEqual(more);
    expect(await takeAndAck(b, 1)).toEqual(more);

    const created = await t.sy.client.createConsumerGroup(Q, "audit", "0");
    expect(created.groups.map((g) => g.name)).toEqual(["thumbnailer", "indexer", "audit"]);
    const c = t.sy.client.lease(Q, 10, { group: "audit" });
    expect(await takeAndAck(c, 6)).toEqual([...ids, ...more]);
    await expect(t.sy.client.createConsumerGroup(Q, "audit")).rejects.toMatchObject({ code: 6, details: expect.stringContaining("already") });
    // The group calls are in the audit log like other queue admin calls.
    const logs = (await t.sy.client.listAuditLogs(100)).logs.filter((l) => l.method.endsWith("CreateConsumerGroup"));
    expect(logs.map((l) => [l.target, l.detail, l.code])).toEqual([[Q, "group=audit start=$", 6], [Q, "group=audit start=0", 0]]);

    // Moving a group back replays from there.
    await t.sy.client.setConsumerGroupPosition(Q, "indexer", ids[2]);
    expect(await takeAndAck(b, 3)).toEqual([ids[3], ids[4], more[0]]);
    const stats = await t.sy.client.getQueueStats(Q);
    expect(stats.groups.map((g) => [g.name, g.pending, g.lag, g.lastDeliveredId]).sort()).toEqual([
      ["audit", 0n, 0n, more[0]], ["indexer", 0n, 0n, more[0]], ["thumbnailer", 0n, 0n, more[0]],
    ]);

    // Deleting a group ends its streams and takes it out of the declaration.
    const deleted = await t.sy.client.deleteConsumerGroup(Q, "audit");
    expect(deleted.groups.map((g) => g.name)).toEqual(["thumbnailer", "indexer"]);
    expect(await c.ended).toMatchObject({ code: 5 });
    await expect(t.sy.client.setConsumerGroupPosition(Q, "audit", "0")).rejects.toMatchObject({ code: 5 });
    await expect(t.sy.client.setConsumerGroupPosition(Q, "indexer", "later")).rejects.toMatchObject({ code: 3 });
    await expect(t.sy.client.setConsumerGroupPosition(Q, "indexer", "1-18446744073709551616")).rejects.toMatchObject({ code: 3 });
    await expect(t.sy.client.createConsumerGroup(Q, "late", "18446744073709551616")).rejects.toMatchObject({ code: 3 });
    await t.sy.client.createConsumerGroup(Q, "last", "18446744073709551615-18446744073709551615");
    await t.sy.client.deleteConsumerGroup(Q, "last");
    await expect(t.sy.client.createConsumerGroup("{not-a-stream}", "g")).rejects.toMatchObject({ code: 5 });
    await Promise.all([a.close(), b.close()]);
  });

  it("adds a group that Redis has but the declaration lacks at its position, so it can be read, moved and deleted", async () => {
    const Q = "{adopt}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const [first, second] = await t.sy.client.enqueue(Q, ["1", "2"]);
    await t.redis.plain.xgroup("CREATE", Q, "analytics", first); // another Redis client's group
    const created = await t.sy.client.createConsumerGroup(Q, "analytics", "0");
    expect(created.groups.map((g) => g.name)).toEqual(["g", "analytics"]);
    const lease = t.sy.client.lease(Q, 5, { group: "analytics" });
    expect(await takeAndAck(lease, 1)).toEqual([second]);
    await t.sy.client.setConsumerGroupPosition(Q, "analytics", "0");
    expect(await takeAndAck(lease, 2)).toEqual([first, second]);
    await expect(t.sy.client.createConsumerGroup(Q, "analytics")).rejects.toMatchObject({ code: 6 });
    await t.sy.client.deleteConsumerGroup(Q, "analytics");
    await lease.close();
  });

  it("refuses group calls on a list queue", async () => {
    await t.sy.client.createQueue({ name: "{a-list}", mode: QueueMode.RELIABLE });
    await expect(t.sy.client.createConsumerGroup("{a-list}", "g")).rejects.toMatchObject({ code: 9, details: expect.stringContaining("STREAM") });
  });
});

describe("fencing across group moves", () => {
  /** How an ack of `token` ends: "acked" or its gRPC code. */
  const ackOutcome = (token: string) => t.sy.client.ack(token).then(() => "acked", (e: { code: number }) => e.code);

  it("refuses a token from before a move back once the entry is delivered again, though Redis restarts its count at 1", async () => {
    const Q = "{fence-move}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const [id] = await t.sy.client.enqueue(Q, ["one"]);
    const lease = t.sy.client.lease(Q, 5, { group: "g" });
    const [first] = await lease.take(1);
    await t.sy.client.setConsumerGroupPosition(Q, "g", "0");
    const [second] = await lease.take(1);
    // The same entry, the same consumer (this instance) and the same count: only the fence tells them apart.
    expect([second.id, second.deliveryCount]).toEqual([id, 1]);
    expect(await ackOutcome(first.leaseToken)).toBe(9);
    expect(await ackOutcome(second.leaseToken)).toBe("acked");
    await lease.close();
  });

  it("refuses a token from before a group was deleted and created again", async () => {
    const Q = "{fence-recreate}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }] });
    const [id] = await t.sy.client.enqueue(Q, ["one"]);
    const lease = t.sy.client.lease(Q, 5, { group: "g" });
    const [first] = await lease.take(1);
    await t.sy.client.deleteConsumerGroup(Q, "g");
    await expect(lease.ended).resolves.toMatchObject({ code: 5 });
    await t.sy.client.createConsumerGroup(Q, "g", "0");
    const again = t.sy.client.lease(Q, 5, { group: "g" });
    const [second] = await again.take(1);
    expect([second.id, second.deliveryCount]).toEqual([id, 1]);
    expect(await ackOutcome(first.leaseToken)).toBe(9);
    expect(await ackOutcome(second.leaseToken)).toBe("acked");
    await again.close();
  });
});

describe("deleting a group", () => {
  it("takes its pending entries' records out of the counts hash, a thousand a call, and leaves other groups' alone", async () => {
    const Q = "{delete-records}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g", startId: "0" }, { name: "g:2", startId: "0" }] });
    await t.sy.client.enqueue(Q, Array.from({ length: 2500 }, (_, i) => `e${i}`));
    const held = t.sy.client.lease(Q, 2500, { group: "g" });
    const [retried, ...rest] = await held.take(2500);
    await t.sy.client.retry(retried.leaseToken, { reason: "kept as e:", delayMs: 60_000 });
    const other = t.sy.client.lease(Q, 3, { group: "g:2" });
    const others = await other.take(3);
    // A group's records are "f:<group>:<entry id>" and "e:<group>:<entry id>" (group "g:2"'s begin like g's).
    const fields = async (prefix: string) => (await t.redis.plain.hkeys(`${Q}.leases`)).filter((f) => f.startsWith(prefix) && /^\d+-\d+$/.test(f.slice(prefix.length)));
    expect([(await fields("f:g:")).length, await fields("e:g:")]).toEqual([2500, [`e:g:${retried.id}`]]);
    await t.sy.client.deleteConsumerGroup(Q, "g");
    await expect(held.ended).resolves.toMatchObject({ code: 5 });
    expect([await fields("f:g:"), await fields("e:g:")]).toEqual([[], []]);
    expect((await fields("f:g:2:")).sort()).toEqual(others.map((d) => `f:g:2:${d.id}`).sort());
    expect((await t.redis.plain.xinfo("GROUPS", Q) as unknown[][]).map((g) => g[1])).toEqual(["g:2"]);
    expect(rest).toHaveLength(2499);
    await other.close();
  });
});

describe("reclaiming idle entries", () => {
  it("delivers entries idle past min_idle again with a grown count, refuses the stale token, and dead-letters past max_deliveries", async () => {
    const Q = "{reclaim}";
    const MIN_IDLE_MS = 150;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(MIN_IDLE_MS), maxDeliveries: 2 });
    const [id] = await t.sy.client.enqueue(Q, ["slow"]);
    const stalled = t.sy.client.lease(Q, 1, { group: "g" });
    const [first] = await stalled.take(1);
    stalled.setCredit(0); // a worker that holds its entry and takes nothing more
    const fresh = t.sy.client.lease(Q, 1, { group: "g" });
    const [second] = await fresh.take(1); // once min_idle (Redis's clock) passed
    expect([second.id, second.deliveryCount]).toEqual([id, 2]);
    expect(second.lastError).toBe("");
    await expect(t.sy.client.ack(first.leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
    // The fresh holder also stalls: past max_deliveries (2) the entry is dead-lettered and acked.
    fresh.setCredit(0);
    const watcher = t.sy.client.lease(Q, 1, { group: "g" });
    await expect.poll(() => t.redis.plain.llen(`${Q}.dead`), { timeout: 5000 }).toBe(1);
    const dead = decodeItem((await t.redis.plain.lrangeBuffer(`${Q}.dead`, 0, 0))[0]);
    expect(dead).toMatchObject({ id, deliveries: 2, lastError: "not settled within min_idle" });
    expect((await t.sy.client.getQueueStats(Q)).groups[0].pending).toBe(0n);
    await expect(t.sy.client.ack(second.leaseToken)).rejects.toMatchObject({ code: 9 });
    await Promise.all([stalled.close(), fresh.close(), watcher.close()]);
  });

  it("takes a crashed consumer out of the group once its entries were reclaimed, so the group counts live consumers", async () => {
    const Q = "{reclaim-consumers}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(150) });
    const [id] = await t.sy.client.enqueue(Q, ["held by the dead"]);
    // An instance that read the entry and was killed: nobody retires its consumer.
    await t.redis.plain.xreadgroup("GROUP", "g", "crashed000", "COUNT", 1, "STREAMS", Q, ">");
    const lease = t.sy.client.lease(Q, 1, { group: "g" });
    const [again] = await lease.take(1);
    expect([again.id, again.deliveryCount]).toEqual([id, 2]);
    const consumers = ((await t.redis.plain.xinfo("CONSUMERS", Q, "g")) as unknown[][]).map((c) => String(c[1]));
    expect(consumers).toEqual([t.sy.app.queues.instances.id]);
    expect((await t.sy.client.getQueueStats(Q)).groups[0].consumers).toBe(1);
    await t.sy.client.ack(again.leaseToken);
    await lease.close();
  });
});
