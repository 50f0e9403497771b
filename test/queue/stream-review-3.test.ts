/**
 * Stream queues, from the third break review of issue 16: a field named
 * __proto__, a group deleted while its stats are read, lag after a trim, a
 * config file met by groups made at run time, entries handed back behind a
 * long pending list, and pending entries lost to trimming.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../src/queue/envelope.js";
import { createLogger } from "../../src/log.js";
import { groupStats } from "../../src/queue/stream/entries.js";
import type { RedisClient } from "../../src/redis/connection.js";
import { startSwitchyard, useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

describe("a plain XADD's fields", () => {
  it("delivers a field named __proto__ as a header, before and after the dead letters", async () => {
    const Q = "{review3-proto}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], maxDeliveries: 1 });
    await t.redis.plain.xadd(Q, "*", "__proto__", "polluted", "payload", "p1");
    const lease = t.sy.client.lease(Q, 10, { group: "g" });
    const [d] = await lease.take(1);
    expect(Object.keys(d.headers)).toEqual(["__proto__"]);
    expect(d.headers["__proto__"]).toBe("polluted");
    expect(Object.getPrototypeOf(d.headers)).toBe(Object.prototype);
    await t.sy.client.retry(d.leaseToken, { reason: "to the dead letters" });
    const [dead] = (await t.redis.plain.lrangeBuffer(`${Q}.dead`, 0, -1)).map(decodeItem);
    expect(Object.keys(dead.headers)).toEqual(["__proto__"]);
    expect(await t.sy.client.requeueDeadLetters(Q, "all")).toBe(1);
    const [again] = await lease.take(1);
    expect(Buffer.from(again.payload).toString()).toBe("p1");
    expect({ ...again.headers }).toEqual(JSON.parse('{"__proto__":"polluted"}'));
    await t.sy.client.ack(again.leaseToken);
    await lease.close();
  });

  it("takes the last value of a field given twice, in the delivery and in the dead letter alike", async () => {
    const Q = "{review3-twice}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], maxDeliveries: 1 });
    await t.redis.plain.xadd(Q, "*", "payload", "first", "k", "1", "payload", "second", "k", "2");
    const lease = t.sy.client.lease(Q, 10, { group: "g" });
    const [d] = await lease.take(1);
    expect(Buffer.from(d.payload).toString()).toBe("second");
    expect({ ...d.headers }).toEqual({ k: "2" });
    await t.sy.client.retry(d.leaseToken, { reason: "to the dead letters" });
    const [dead] = (await t.redis.plain.lrangeBuffer(`${Q}.dead`, 0, -1)).map(decodeItem);
    expect(Buffer.from(dead.payload).toString()).toBe("second");
    expect({ ...dead.headers }).toEqual({ k: "2" });
    await lease.close();
  });
});

describe("GetQueueStats of a stream queue", () => {
  it("leaves out a group deleted between XINFO GROUPS and its XPENDING, rather than failing", async () => {
    const Q = "{review3-stats}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }, { name: "h", startId: "0" }] });
    await t.sy.client.enqueue(Q, ["1", "2"]);
    await t.redis.plain.xreadgroup("GROUP", "g", "c", "COUNT", 2, "STREAMS", Q, ">");
    await t.redis.plain.xreadgroup("GROUP", "h", "c", "COUNT", 1, "STREAMS", Q, ">");
    // The real client, with group h deleted (by another client) just before h's XPENDING goes out.
    const client = t.redis.plain as unknown as RedisClient;
    const racing = new Proxy(client, {
      get(target, prop, receiver) {
        if (prop !== "xpending") return Reflect.get(target, prop, receiver);
        return async (key: string, group: string, ...rest: unknown[]) => {
          if (group === "h") await t.redis.plain.xgroup("DESTROY", Q, "h");
          return (target.xpending as (...a: unknown[]) => Promise<unknown>)(key, group, ...rest);
        };
      },
    });
    const stats = await groupStats(racing, Q);
    expect(stats.map((g) => [g.name, g.pending])).toEqual([["g", 2]]);
    // A stream deleted meanwhile has no groups.
    await t.redis.plain.del(Q);
    expect(await groupStats(client, Q)).toEqual([]);
  });

  it("reports lag 0 for a group that has read up to the stream's last id after entries were trimmed unread", async () => {
    const Q = "{review3-lag}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: 10n } });
    const lease = t.sy.client.lease(Q, 1000, { group: "g" });
    await t.sy.client.enqueue(Q, ["first"]);
    const [first] = await lease.take(1);
    await t.sy.client.ack(first.leaseToken);
    // Appended while nobody reads: most are trimmed unread.
    await t.sy.client.enqueue(Q, Array.from({ length: 400 }, (_, i) => `x${i}`));
    const held = await t.redis.plain.xlen(Q);
    const got = await lease.take(held);
    await Promise.all(got.map((d) => t.sy.client.ack(d.leaseToken)));
    const [g] = (await t.sy.client.getQueueStats(Q)).groups;
    const [[last]] = await t.redis.plain.xrevrange(Q, "+", "-", "COUNT", 1);
    expect(g.lastDeliveredId).toBe(last);
    expect(g.pending).toBe(0n);
    expect(g.lag).toBe(0n);
    // One entry more, unread: lag 1 (Redis's own count, the group being behind the last id).
    await lease.close();
    await t.sy.client.enqueue(Q, ["unread"]);
    const [after] = (await t.sy.client.getQueueStats(Q)).groups;
    expect(after.lastDeliveredId).toBe(last);
    expect(after.lag === undefined || after.lag >= 1n).toBe(true);
    // Moved past the stream's last id (Redis knows no lag there): nothing left to read.
    const future = `${Date.now() + 86_400_000}-0`;
    await t.sy.client.setConsumerGroupPosition(Q, "g", future);
    const [moved] = (await t.sy.client.getQueueStats(Q)).groups;
    expect([moved.lastDeliveredId, moved.lag]).toEqual([future, 0n]);
  });
});

describe("a stream queue in the config file", () => {
  it("keeps a group made by CreateConsumerGroup when another instance starts with the file, and adds the file's new groups", async () => {
    const Q = "{review3-file}";
    const file = join(mkdtempSync(join(tmpdir(), "sy-review3-")), "switchyard.json");
    const declare = (groups: string[]) => writeFileSync(file, JSON.stringify({ queues: [{ name: Q, mode: "QUEUE_MODE_STREAM", groups: groups.map((name) => ({ name })) }] }));
    declare(["g"]);
    const a = await startSwitchyard(t.redis, { config: { configFile: file } });
    try {
      await a.client.enqueue(Q, ["1", "2"]);
      await a.client.createConsumerGroup(Q, "audit", "0");
      const audit = a.client.lease(Q, 5, { group: "audit" });
      const [held] = await audit.take(1);
      // Scale-out (or a rolling restart) with the file, which also names a new group.
      declare(["g", "late"]);
      const b = await startSwitchyard(t.redis, { config: { configFile: file } });
      try {
        expect((await b.client.getQueue(Q)).groups.map((g) => g.name)).toEqual(["g", "audit", "late"]);
        expect((await b.client.getQueueStats(Q)).groups.map((g) => [g.name, g.pending])).toEqual([["audit", 2n], ["g", 0n], ["late", 0n]]); // both delivered to the open stream (credit 5)
        // The audit stream goes on: its held entry acks, and it gets the next one.
        await a.client.ack(held.leaseToken);
        const [next] = await audit.take(1);
        expect(Buffer.from(next.payload).toString()).toBe("2");
        await a.client.ack(next.leaseToken);
        // The same file again changes nothing.
        const version = await t.redis.plain.hget("{switchyard}:queues", Q);
        const c = await startSwitchyard(t.redis, { config: { configFile: file } });
        await c.stop();
        expect(await t.redis.plain.hget("{switchyard}:queues", Q)).toBe(version);
      } finally {
        await audit.close();
        await b.stop();
      }
    } finally {
      await a.stop();
    }
  });
});

describe("an entry handed back while another worker holds many", () => {
  // The pump's wait is min_idle (10 min) here: only the handback's own lease call can deliver it in time.
  for (const how of ["close", "retry"] as const) {
    it(`is delivered again at once after a ${how}, whatever the group's pending list holds before it`, { timeout: 20_000 }, async () => {
      const sy = await startSwitchyard(t.redis, { config: { blockTimeoutSec: 3600 } });
      const Q = `{review3-handback-${how}}`;
      try {
        await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(600_000) });
        await sy.client.enqueue(Q, Array.from({ length: 1000 }, (_, i) => `held-${i}`));
        const [last] = await sy.client.enqueue(Q, ["handed-back"]);
        const big = sy.client.lease(Q, 1000, { group: "g" });
        expect(await big.take(1000)).toHaveLength(1000);
        const b = sy.client.lease(Q, 1, { group: "g" });
        const [d] = await b.take(1);
        expect(d.id).toBe(last);
        const c = sy.client.lease(Q, 1, { group: "g" });
        await c.opened;
        if (how === "close") await b.close();
        else {
          b.setCredit(0); // only c can take it
          await sy.client.retry(d.leaseToken, { reason: "again", delayMs: 0 });
        }
        const [again] = await c.take(1);
        expect([again.id, again.deliveryCount, Buffer.from(again.payload).toString()]).toEqual([last, 2, "handed-back"]);
        if (how === "retry") expect(again.lastError).toBe("again");
        await sy.client.ack(again.leaseToken);
        const [g] = (await sy.client.getQueueStats(Q)).groups;
        expect(g.pending).toBe(1000n);
        await Promise.all([big.close(), b.close(), c.close()]);
      } finally {
        await sy.stop();
      }
    });
  }
});

describe("many entries handed back at once", () => {
  it("go out again, 9,000 of them to a stream of credit 10,000 (the lease claims them in chunks)", { timeout: 60_000 }, async () => {
    const sy = await startSwitchyard(t.redis, { config: { leaseBatch: 10_000 } });
    const Q = "{review3-many}";
    const N = 9_000;
    try {
      await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(600_000) });
      for (let i = 0; i < N; i += 1000) await sy.client.enqueue(Q, Array.from({ length: 1000 }, (_, j) => `e${i + j}`));
      const a = sy.client.lease(Q, 10_000, { group: "g" });
      expect(await a.take(N)).toHaveLength(N);
      const b = sy.client.lease(Q, 10_000, { group: "g" });
      await b.opened;
      await a.close(); // all parked, due at once
      const again = await b.take(N);
      expect(new Set(again.map((d) => Buffer.from(d.payload).toString())).size).toBe(N);
      expect(again.every((d) => d.deliveryCount === 2)).toBe(true);
      await b.close();
    } finally {
      await sy.stop();
    }
  });
});

describe("an entry handed back, when the lease call that carries it fails or its group moved back", () => {
  it("is looked for again by the next call after a failed one, not left behind the group's pending list", { timeout: 20_000 }, async () => {
    const warnings: { msg?: string }[] = [];
    const sy = await startSwitchyard(t.redis, { log: createLogger("warn", (line) => warnings.push(JSON.parse(line) as { msg?: string })) });
    const Q = "{review3-failed-call}";
    const r = t.redis.plain;
    try {
      await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(120_000) });
      await sy.client.enqueue(Q, Array.from({ length: 3000 }, (_, i) => `busy-${i}`));
      await r.xreadgroup("GROUP", "g", "busy", "COUNT", 3000, "STREAMS", Q, ">"); // another worker's long pending list
      const [e] = await sy.client.enqueue(Q, ["E"]);
      const l = sy.client.lease(Q, 1, { group: "g" });
      const [d] = await l.take(1);
      expect(d.id).toBe(e);
      // The dead-letter key of another type: every lease call is refused, those carrying E's id too.
      await r.set(`${Q}.dead`, "not a list");
      l.release([d.leaseToken]);
      const parked = async () => ((await r.xpending(Q, "g", "-", "+", 10, "switchyard.parked")) as [string][]).map(([id]) => id);
      await expect.poll(parked).toEqual([e]);
      // Two calls refused after E was parked (so after its id was kept): at least one carried it.
      const failures = () => warnings.filter((w) => w.msg === "lease pump failed; retrying").length;
      const before = failures();
      await expect.poll(failures).toBeGreaterThanOrEqual(before + 2);
      await r.del(`${Q}.dead`);
      const [again] = await l.take(1);
      expect([again.id, again.deliveryCount]).toEqual([e, 1]); // released: handed back uncounted
      await sy.client.ack(again.leaseToken);
      await l.close();
    } finally {
      await sy.stop();
    }
  });

  it("goes out once when its group was moved back before the call: as the group reads it again", async () => {
    const Q = "{review3-moved-back}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(120_000) });
    const [e] = await t.sy.client.enqueue(Q, ["E"]);
    const l = t.sy.client.lease(Q, 5, { group: "g" });
    const [d] = await l.take(1);
    l.setCredit(0);
    await t.sy.client.retry(d.leaseToken, { delayMs: 0 }); // parked, due, its id kept for the next call
    await t.sy.client.setConsumerGroupPosition(Q, "g", "0");
    l.setCredit(5);
    const [again] = await l.take(1);
    expect([again.id, again.deliveryCount]).toEqual([e, 1]); // Redis restarted its count
    const [marker] = await t.sy.client.enqueue(Q, ["marker"]);
    const [next] = await l.take(1);
    expect(next.id).toBe(marker); // E was not delivered a second time in between
    await t.sy.client.ack(again.leaseToken);
    await t.sy.client.ack(next.leaseToken);
    await l.close();
  });
});

describe("entries handed back when min_idle changes", () => {
  const parked = async (q: string) =>
    ((await t.redis.plain.xpending(q, "g", "-", "+", 100, "switchyard.parked")) as [string, string, number, number][]).map((p) => ({ id: p[0], idle: p[2] }));

  it("one due at once stays due when min_idle is raised", async () => {
    const Q = "{review3-raise}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(1_000) });
    await t.sy.client.enqueue(Q, ["e1"]);
    const l = t.sy.client.lease(Q, 1, { group: "g" });
    const [d] = await l.take(1);
    await t.sy.client.pauseQueue(Q);
    await t.sy.client.retry(d.leaseToken, { reason: "again", delayMs: 0 });
    await t.sy.client.updateQueue({ name: Q, minIdle: durationFromMs(600_000) }, ["min_idle"]);
    expect((await parked(Q))[0].idle).toBeGreaterThanOrEqual(600_000);
    await t.sy.client.resumeQueue(Q);
    await t.sy.client.enqueue(Q, ["marker"]);
    const [next] = await l.take(1);
    expect([Buffer.from(next.payload).toString(), next.deliveryCount]).toEqual(["e1", 2]);
    await t.sy.client.ack(next.leaseToken);
    await l.close();
  });

  it("one waiting out a retry's delay waits at most the new min_idle when it is lowered, not less", async () => {
    const Q = "{review3-lower}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(60_000) });
    await t.sy.client.enqueue(Q, ["e1"]);
    const l = t.sy.client.lease(Q, 2, { group: "g" });
    const [d] = await l.take(1);
    await t.sy.client.retry(d.leaseToken, { reason: "later", delayMs: 50_000 });
    await t.sy.client.updateQueue({ name: Q, minIdle: durationFromMs(5_000) }, ["min_idle"]);
    await expect.poll(() => t.sy.app.queues.registry.cached(Q)?.minIdleMs).toBe(5_000);
    const [{ id, idle }] = await parked(Q);
    expect(id).toBe(d.id);
    expect(idle).toBeLessThan(5_000); // due in 5 s less the time since the update: not now
    // A lease call runs (it delivers the marker) and leaves the retried entry parked.
    await t.sy.client.enqueue(Q, ["marker"]);
    const [m] = await l.take(1);
    expect(Buffer.from(m.payload).toString()).toBe("marker");
    expect((await parked(Q)).map((p) => p.id)).toEqual([d.id]);
    await t.sy.client.ack(m.leaseToken);
    await l.close();
  });
});

describe("pending entries the trimming policy removes", () => {
  it("are counted (switchyard_items_trimmed_total) and logged when a lease call finds them, and nothing else is lost", async () => {
    const warnings: { msg?: string; group?: string; entries?: number }[] = [];
    const log = createLogger("warn", (line) => warnings.push(JSON.parse(line) as (typeof warnings)[number]));
    const sy = await startSwitchyard(t.redis, { log });
    const Q = "{review3-trimmed}";
    try {
      await sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], streamTrim: { maxLen: 5n } });
      await sy.client.enqueue(Q, ["a", "b", "c"]);
      const first = sy.client.lease(Q, 3, { group: "g" });
      expect(await first.take(3)).toHaveLength(3);
      await first.close(); // all three handed back (parked)
      // Appends trim them before anyone takes them again (MAXLEN ~ 5 trims whole nodes: enough to pass a node).
      for (let i = 0; i < 10; i++) await sy.client.enqueue(Q, Array.from({ length: 100 }, (_, j) => `new-${i}-${j}`));
      const ids = new Set((await t.redis.plain.xrange(Q, "-", "+")).map(([id]) => id));
      const kept = (await t.redis.plain.xpending(Q, "g", "-", "+", 10) as [string][]).filter(([id]) => ids.has(id)).length;
      expect(kept).toBe(0); // every handed-back entry is gone from the stream, still pending
      const second = sy.client.lease(Q, 3, { group: "g" });
      const next3 = await second.take(3);
      // One lease call: the three parked ids found trimmed, then the oldest entries the stream still holds.
      const oldest = (await t.redis.plain.xrange(Q, "-", "+", "COUNT", 3)).map(([id]) => id);
      expect(next3.map((d) => [d.id, d.deliveryCount])).toEqual(oldest.map((id) => [id, 1]));
      const trimmed = await sy.app.metrics.registry.getSingleMetric("switchyard_items_trimmed_total")!.get();
      expect(trimmed.values.find((v) => v.labels.queue === Q)?.value).toBe(3);
      expect(warnings.filter((w) => w.msg?.includes("trimmed from the stream")).map((w) => [w.group, w.entries])).toEqual([["g", 3]]);
      // Their records are gone: the counts hash holds the new delivery's only.
      expect((await t.redis.plain.hkeys(`${Q}.leases`)).filter((f) => f.startsWith("f:")).sort()).toEqual(oldest.map((id) => `f:g:${id}`).sort());
      await Promise.all(next3.map((d) => sy.client.ack(d.leaseToken)));
      await second.close();
    } finally {
      await sy.stop();
    }
  });
});
