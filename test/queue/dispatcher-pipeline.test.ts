/**
 * Credit freed while a lease call waits for its answer is asked for at once:
 * the pump sends another call for it (up to LEASE_CALLS_IN_FLIGHT), rather
 * than a round trip later. Redis holds the calls (CLIENT PAUSE WRITE) so the
 * test sees them all sent before any answers. Each asks only for credit the
 * calls before it did not; and when the streams' credit shrinks meanwhile,
 * the items no stream can take go back together, in queue order.
 */
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { pushItems } from "../../src/redis/scripts.js";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { Settler } from "../../src/queue/settler.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { deliveryField, type LeaseRef } from "../../src/queue/token.js";
import { testDispatchHost, useDispatchRedis } from "../helpers/dispatch.js";

const log = createLogger("error");
const t = useDispatchRedis(log);

/** The command connection as Redis lists it: `b` in flags while paused, qbuf = bytes of the calls queued behind. */
async function commandClient(id: number): Promise<{ blocked: boolean; qbuf: number }> {
  const line = (await t.redis.plain.client("LIST", "ID", id)) as string;
  return { blocked: /flags=\S*b/.test(line), qbuf: Number(line.match(/qbuf=(\d+)/)?.[1]) };
}

describe("a pump with credit freed while its lease call is in flight", () => {
  for (const shrink of [false, true]) {
    it(shrink ? "gives back what the shrunk credit cannot take, in queue order" : "sends a call per freed unit at once", async () => {
      const clock = new ManualClock();
      const config = validateQueueSpec({ name: `{pipeline-${shrink}}`, mode: "reliable" }, clock.now());
      const givenBack: number[][] = [];
      const host = { ...testDispatchHost(t.conn, clock, log), giveBack: async (_: unknown, refs: LeaseRef[]) => void givenBack.push(refs.map((r) => r.fence)) };
      const dispatcher = new QueueDispatcher(config, host);
      const batches: Delivery[][] = [];
      const sink = { deliver: (b: Delivery[]) => batches.push(b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
      const stream = new LeaseStream(config, 3, sink, clock.now());
      await pushItems(t.conn.client, config.name, 0, [BulkStrings.of(["1", "2", "3", "4", "5", "6", "7"].map((p) => Buffer.from(p)))]);
      dispatcher.add(stream);
      await expect.poll(() => batches.length).toBe(1);
      const id = Number(await t.conn.client.client("ID"));

      await t.redis.plain.client("PAUSE", 60_000, "WRITE");
      try {
        const free = (i: number) => {
          stream.held.delete(batches[0][i].token);
          dispatcher.kick();
        };
        free(0);
        await expect.poll(async () => (await commandClient(id)).blocked).toBe(true);
        free(1);
        await expect.poll(async () => (await commandClient(id)).qbuf).toBeGreaterThan(0);
        const oneCall = (await commandClient(id)).qbuf;
        free(2);
        // Three calls of one item each sent: one held by the pause, two queued behind it.
        await expect.poll(async () => (await commandClient(id)).qbuf).toBe(2 * oneCall);
        if (shrink) stream.credit = 1;
      } finally {
        await t.redis.plain.client("UNPAUSE");
      }

      const payloads = (b: Delivery[]) => b.map((d) => Buffer.from(d.item.payload).toString());
      if (!shrink) {
        await expect.poll(() => batches.length).toBe(4);
        expect(batches.map(payloads)).toEqual([["1", "2", "3"], ["4"], ["5"], ["6"]]);
      } else {
        await expect.poll(() => givenBack.length).toBe(1);
        expect(batches.map(payloads)).toEqual([["1", "2", "3"], ["4"]]);
        // Items 5 and 6 (fences 5, 6) back in one call, pushed last first so 5 is at the front again.
        expect(givenBack).toEqual([[6, 5]]);
      }
      expect(await t.redis.plain.llen(config.name)).toBe(1);
      dispatcher.close();
    });
  }
});

describe("a push sent while the pump's lease is in flight", () => {
  it("is leased by the next call at once: the short answer does not send the pump to wait on a wake-up", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{pushed-in-flight}", mode: "reliable" }, clock.now());
    const dispatcher = new QueueDispatcher(config, testDispatchHost(t.conn, clock, log));
    const batches: Delivery[][] = [];
    const sink = { deliver: (b: Delivery[]) => batches.push(b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    const id = Number(await t.conn.client.client("ID"));
    const blmoves = async () => Number((await t.redis.plain.info("commandstats")).match(/cmdstat_blmove:calls=(\d+)/)?.[1] ?? 0);
    const before = await blmoves();

    await t.redis.plain.client("PAUSE", 60_000, "WRITE");
    try {
      // The queue is empty: the lease call goes out and waits behind the pause.
      dispatcher.add(new LeaseStream(config, 1, sink, clock.now()));
      await expect.poll(async () => (await commandClient(id)).blocked).toBe(true);
      // This instance pushes behind it, on the same connection: Redis runs the lease first, and it finds nothing.
      const pushed = pushItems(t.conn.client, config.name, 0, [BulkStrings.of([Buffer.from("late")])]);
      dispatcher.pushed();
      await expect.poll(async () => (await commandClient(id)).qbuf).toBeGreaterThan(0);
      await t.redis.plain.client("UNPAUSE");
      await pushed;
    } finally {
      await t.redis.plain.client("UNPAUSE");
    }
    await expect.poll(() => batches.length).toBe(1);
    expect(Buffer.from(batches[0][0].item.payload).toString()).toBe("late");
    expect(await blmoves()).toBe(before);
    dispatcher.close();
  });
});


describe("lease calls of each kind in flight at once", () => {
  it("share out their answers in the order they were sent, when Redis answers them in one read", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{kinds-in-flight}", mode: "reliable" }, clock.now());
    const dispatcher = new QueueDispatcher(config, testDispatchHost(t.conn, clock, log));
    const settler = new Settler(t.conn.client, clock, undefined, (_, __, send) => dispatcher.leaseBeside(send));
    const batches: Delivery[][] = [];
    const sink = { deliver: (b: Delivery[]) => batches.push(b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    const stream = new LeaseStream(config, 1, sink, clock.now());
    await pushItems(t.conn.client, config.name, 0, [BulkStrings.of(["1", "2", "3"].map((p) => Buffer.from(p)))]);
    dispatcher.add(stream);
    await expect.poll(() => batches.length).toBe(1);
    const id = Number(await t.conn.client.client("ID"));

    let pushed: Promise<number> | undefined;
    await t.redis.plain.client("PAUSE", 60_000, "WRITE");
    try {
      // The ack of "1" carries a lease for the credit it frees (settle-lease.lua), held by the pause...
      const [first] = batches[0];
      const ref = stream.held.get(first.token)!;
      stream.held.delete(first.token);
      void settler.settle(config, { action: "ack", delivery: deliveryField(ref) });
      await expect.poll(async () => (await commandClient(id)).blocked).toBe(true);
      // ...then credit opened twice: the pump's own lease (lease.lua), and a push that carries one (push-lease.lua).
      stream.credit = 2;
      dispatcher.kick();
      await expect.poll(async () => (await commandClient(id)).qbuf).toBeGreaterThan(0);
      const oneLease = (await commandClient(id)).qbuf;
      stream.credit = 3;
      pushed = dispatcher.push(0, [BulkStrings.of([Buffer.from("4")])]);
      await expect.poll(async () => (await commandClient(id)).qbuf).toBeGreaterThan(oneLease);
    } finally {
      await t.redis.plain.client("UNPAUSE");
    }
    expect(await pushed).toBe(1); // the list's length once "4" was pushed, before its lease took it
    await expect.poll(() => batches.length).toBe(4);
    // Redis ran the calls in the order they were sent, each taking the oldest item: the streams get them in that order.
    expect(batches.map((b) => b.map((d) => Buffer.from(d.item.payload).toString()))).toEqual([["1"], ["2"], ["3"], ["4"]]);
    dispatcher.close();
  });
  it("share out in the order Redis ran them when a call is sent again (EVAL after NOSCRIPT) behind a later one", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{noscript-in-flight}", mode: "reliable" }, clock.now());
    const dispatcher = new QueueDispatcher(config, testDispatchHost(t.conn, clock, log));
    const batches: Delivery[][] = [];
    const sink = { deliver: (b: Delivery[]) => batches.push(b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} };
    const stream = new LeaseStream(config, 1, sink, clock.now());
    await pushItems(t.conn.client, config.name, 0, [BulkStrings.of(["1", "2", "3"].map((p) => Buffer.from(p)))]);
    await t.redis.plain.script("FLUSH"); // as after a restart or a failover: Redis has no script
    dispatcher.add(stream);
    await expect.poll(() => batches.length).toBe(1); // ioredis loaded lease.lua again for it (EVAL)
    const id = Number(await t.conn.client.client("ID"));

    let pushed: Promise<number> | undefined;
    await t.redis.plain.client("PAUSE", 60_000, "WRITE");
    try {
      // A push carrying a lease: its EVALSHA of push-lease.lua will be refused (NOSCRIPT) and sent again as EVAL...
      stream.credit = 2;
      pushed = dispatcher.push(0, [BulkStrings.of([Buffer.from("4")])]);
      await expect.poll(async () => (await commandClient(id)).blocked).toBe(true);
      // ...after the pump's lease, sent behind it, has run and taken the older item.
      stream.credit = 3;
      dispatcher.kick();
      await expect.poll(async () => (await commandClient(id)).qbuf).toBeGreaterThan(0);
    } finally {
      await t.redis.plain.client("UNPAUSE");
    }
    await pushed;
    await expect.poll(() => batches.length).toBe(3);
    expect(batches.map((b) => b.map((d) => Buffer.from(d.item.payload).toString()))).toEqual([["1"], ["2"], ["3"]]);
    expect(batches.map((b) => b.map((d) => d.fence))).toEqual([[1], [2], [3]]);
    dispatcher.close();
  });
});
