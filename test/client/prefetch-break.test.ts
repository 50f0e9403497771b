/**
 * Review of runWorker's deep prefetch (prefetchMs, prefetchBytes; docs/worker-protocol.md
 * "Prefetch and release"), against real Redis and gRPC: the defects found, each named for
 * what it checks.
 */
import { describe, expect, it, vi } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import { ManualClock } from "../../src/clock.js";
import { credits, text } from "../helpers/prefetch.js";
import { useSwitchyard } from "../helpers/switchyard.js";

/** One Redis and one Switchyard for the file: `t.sy`, `t.redis`. */
const t = useSwitchyard();

describe("defects", () => {
  // Handlers alternating between two run times keep the moving average near a whole number of
  // deliveries: rounded down, the depth moved by one each item, and at a depth under 4 one is
  // more than a quarter, so every item sent a credit message (c = 1 at 2/3 ms: 169 for 200).
  it.each([
    { c: 1, ms: [4, 6] }, // about 1 ready: 0 and 1 in turn
    { c: 1, ms: [2, 3] }, // about 2 ready: 1 and 2
    { c: 10, ms: [20, 30] }, // about 2 ready at c = 10
  ])("a jittery average near a whole depth sends no credit message per item (c = $c, $ms ms)", async ({ c, ms }) => {
    const Q = `{pf-jitter-${c}-${ms.join("-")}}`;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const changes = vi.spyOn(t.sy.app.queues, "setCredit");
    // The worker's own clock: each handler moves it by its run time, so the times are exact.
    const clock = new ManualClock();
    const N = 100;
    let done = 0;
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: c, clock,
      handler: (d) => void (clock.advance(ms[Number(text(d)) % ms.length]), done++),
    });
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([c]);
      await t.sy.client.enqueue(Q, Array.from({ length: N }, (_, i) => String(i)));
      await expect.poll(() => done).toBe(N);
      expect(changes.mock.calls.length).toBeLessThanOrEqual(3);
    } finally {
      changes.mockRestore();
      await worker.stop();
    }
  });

  // prefetchMs NaN or negative keeps none ready; prefetchBytes NaN made the credit NaN (the
  // credit message failed to encode and the stream ended, reconnecting every 100 ms), and a
  // negative one took the credit below concurrency (0 at c = 1: the worker stalled).
  it.each([
    { prefetchBytes: NaN },
    { prefetchBytes: -1 },
    { prefetch: NaN },
  ])("an unusable prefetch option keeps the credit a whole number within [concurrency, concurrency + prefetch] (%o)", async (opts) => {
    const Q = `{pf-nan-${Object.keys(opts)[0]}-${Object.values(opts)[0]}}`;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const errors: unknown[] = [];
    let done = 0;
    const worker = runWorker({ client: t.sy.client, queue: Q, concurrency: 1, ...opts, onError: (e) => errors.push(e), handler: () => void done++ });
    try {
      await expect.poll(() => credits(t.sy, Q)).toEqual([1]);
      await t.sy.client.enqueue(Q, Array.from({ length: 20 }, (_, i) => `j${i}`));
      await expect.poll(() => done).toBe(20);
      expect(credits(t.sy, Q)).toEqual([1]);
      expect(errors).toEqual([]);
    } finally {
      await worker.stop();
    }
  });
});
