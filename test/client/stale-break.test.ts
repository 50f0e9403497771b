/**
 * Review of runWorker's stale release (a delivery kept ready that waited 20 × prefetchMs for a
 * handler goes back uncounted; docs/worker-protocol.md "Prefetch and release"), against real
 * Redis and gRPC: the defects found, each named for what it checks.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker, SettleError } from "../../src/client/worker.js";
import { ManualClock, type Timer } from "../../src/clock.js";
import { credits, held, text } from "../helpers/prefetch.js";
import { useSwitchyard } from "../helpers/switchyard.js";

/** One Redis and one Switchyard for the file: `t.sy`, `t.redis`. */
const t = useSwitchyard();

/** A worker's clock that counts the timers set for now, and after 50 stops firing them (a busy loop would hang advance()). */
class CountingClock extends ManualClock {
  immediate = 0;
  override setTimer(ms: number, fn: () => unknown): Timer {
    if (ms <= 0 && ++this.immediate > 50) return { cancel: () => undefined };
    return super.setTimer(ms, fn);
  }
}

describe("defects", () => {
  // A delivery kept ready whose extend was refused (the watchdog took it back while the worker
  // stalled) is lost but waits on behind the stuck handler: the sweep counted it stale, could not
  // give it back (giveBack skips lost ones), and armed a 0 ms timer for it again, without end.
  it("a lost delivery waiting behind a stuck handler arms no 0 ms sweep timer over and over", async () => {
    const Q = "{stale-lost}";
    const MIN_IDLE_MS = 3000;
    const serverClock = t.sy.clock as ManualClock;
    const clock = new CountingClock(serverClock.now());
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE, minIdle: durationFromMs(MIN_IDLE_MS), recoverySet: `${Q}.claims` });
    const h = held();
    const errors: unknown[] = [];
    // 20 × 500 ms: the sweep comes after the first extend (every min_idle / 3).
    const worker = runWorker({
      client: t.sy.client, queue: Q, concurrency: 1, prefetch: 4, prefetchMs: 500, clock,
      onError: (err) => errors.push(err),
      handler: (d) => (text(d).startsWith("hang") ? h.handler(d) : undefined),
    });
    try {
      await t.sy.client.enqueue(Q, ["q0"]);
      await expect.poll(() => credits(t.sy, Q)).toEqual([5]);
      await t.sy.client.enqueue(Q, ["hang", "w1"]);
      await expect.poll(() => h.started.length).toBe(1);
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).processing).toBe(2n);
      // The worker stands still while the server passes min_idle: the watchdog takes both back.
      for (let s = 0; s <= MIN_IDLE_MS / 1000; s++) await serverClock.advance(1000);
      await clock.advance(MIN_IDLE_MS / 3);
      await expect.poll(() => errors.filter((e) => e instanceof SettleError).length).toBe(2);
      await clock.advance(10_000);
      expect(clock.immediate).toBeLessThan(3);
    } finally {
      for (const ok of h.finish) ok();
      await worker.stop();
    }
  });
});
