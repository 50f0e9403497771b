/**
 * PushBatcher's ordering contract (src/queue/push-batcher.ts): one push per
 * queue in flight, the pushes that arrive meanwhile written together next, in
 * call order. Redis Cluster can land two pushes in flight in either order (a
 * command sent again after CLUSTERDOWN, TRYAGAIN or a lost connection), so
 * here the writes settle when the test says, in whatever order it chooses.
 * The writes through real Redis are covered in enqueue-coalescing.test.ts.
 */
import { describe, expect, it } from "vitest";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { PushBatcher } from "../../src/queue/push-batcher.js";

interface Write {
  queue: string;
  ttlMs: number;
  /** The values' text, oldest first. */
  values: string[];
  ok(): void;
  fail(err: Error): void;
}

function harness(maxItems = 10) {
  const writes: Write[] = [];
  const batcher = new PushBatcher((queue, ttlMs, values) => {
    return new Promise((ok, fail) => {
      const texts = values.flatMap((v) => v.buffer.toString().split(/\$\d+\r\n|\r\n/).filter(Boolean));
      writes.push({ queue, ttlMs, values: texts, ok: () => ok(undefined), fail });
    });
  }, maxItems);
  const outcomes: string[] = [];
  const push = (queue: string, texts: string[], ttlMs = 0) => {
    const name = texts.join("+");
    batcher
      .push(queue, ttlMs, BulkStrings.of(texts.map((t) => Buffer.from(t))))
      .then(() => outcomes.push(`${name} ok`), (err: Error) => outcomes.push(`${name} ${err.message}`));
  };
  const turn = () => new Promise((done) => setImmediate(done));
  return { batcher, writes, push, outcomes, turn };
}

describe("PushBatcher", () => {
  it("writes a push onto an idle queue at once", () => {
    const h = harness();
    h.push("q", ["a"]);
    expect(h.writes.map((w) => w.values)).toEqual([["a"]]);
  });

  it("holds every later push to a queue until the one in flight settles, then writes them together in call order", async () => {
    const h = harness();
    h.push("q", ["a"]);
    h.push("q", ["b", "c"]);
    await h.turn();
    h.push("q", ["d"]);
    await h.turn();
    // Still only the first write, however many turns pass.
    expect(h.writes.map((w) => w.values)).toEqual([["a"]]);
    h.writes[0].ok();
    await h.turn();
    expect(h.writes.map((w) => w.values)).toEqual([["a"], ["b", "c", "d"]]);
    expect(h.outcomes).toEqual(["a ok"]);
    h.writes[1].ok();
    await h.turn();
    expect(h.outcomes).toEqual(["a ok", "b+c ok", "d ok"]);
  });

  it("keeps queues independent: a stalled push holds back only its own queue", async () => {
    const h = harness();
    h.push("q", ["a"]);
    h.push("r", ["x"]);
    h.push("q", ["b"]);
    h.push("r", ["y"]);
    h.writes[1].ok(); // r's first write settles while q's is still out
    await h.turn();
    expect(h.writes.map((w) => `${w.queue}:${w.values.join("")}`)).toEqual(["q:a", "r:x", "r:y"]);
  });

  it("queues batches beyond the item limit and writes them one after another", async () => {
    const h = harness(3);
    h.push("q", ["a"]);
    h.push("q", ["b", "c"]);
    h.push("q", ["d", "e"]); // 2 + 2 > 3: a batch of its own
    h.push("q", ["f"]);
    for (let i = 0; i < 3; i++) {
      expect(h.writes).toHaveLength(i + 1);
      h.writes[i].ok();
      await h.turn();
    }
    expect(h.writes.map((w) => w.values)).toEqual([["a"], ["b", "c"], ["d", "e", "f"]]);
    expect(h.writes).toHaveLength(3);
  });

  it("fails only the callers of a failed push, and goes on with the next in order", async () => {
    const h = harness();
    h.push("q", ["a"]);
    h.push("q", ["b"]);
    h.push("q", ["c"]);
    h.writes[0].fail(new Error("CLUSTERDOWN"));
    await h.turn();
    expect(h.writes.map((w) => w.values)).toEqual([["a"], ["b", "c"]]);
    h.writes[1].ok();
    await h.turn();
    expect(h.outcomes).toEqual(["a CLUSTERDOWN", "b ok", "c ok"]);
    // The queue is idle again: the next push goes at once.
    h.push("q", ["d"]);
    expect(h.writes).toHaveLength(3);
  });

  it("runs a write that must stay alone (a push waiting for replicas) in the queue's order, joined by nothing", async () => {
    const h = harness();
    const order: string[] = [];
    h.push("q", ["a"]);
    let release = () => {};
    const alone = new Promise<number>((ok) => (release = () => ok(2)));
    const waited = h.batcher.alone("q", () => {
      order.push("alone started");
      return alone;
    });
    h.push("q", ["b"]);
    h.push("q", ["c"]);
    await h.turn();
    expect(order).toEqual([]);
    h.writes[0].ok();
    await h.turn();
    expect(order).toEqual(["alone started"]);
    expect(h.writes).toHaveLength(1); // b and c wait behind it
    release();
    expect(await waited).toBe(2);
    await h.turn();
    expect(h.writes.map((w) => w.values)).toEqual([["a"], ["b", "c"]]);
  });

  it("fails a write that throws instead of returning a promise, and goes on with the next", async () => {
    const h = harness();
    h.push("q", ["a"]);
    const thrown = h.batcher.alone("q", () => {
      throw new Error("no connection");
    });
    h.push("q", ["b"]);
    h.writes[0].ok();
    await expect(thrown).rejects.toThrow("no connection");
    await h.turn();
    expect(h.writes.map((w) => w.values)).toEqual([["a"], ["b"]]);
  });

  it("gives a batch the last non-zero ttl of its calls", async () => {
    const h = harness();
    h.push("q", ["a"], 5000);
    h.push("q", ["b"], 600_000);
    h.push("q", ["c"], 60_000);
    h.push("q", ["d"], 0);
    h.writes[0].ok();
    await h.turn();
    expect(h.writes.map((w) => w.ttlMs)).toEqual([5000, 60_000]);
  });
});
