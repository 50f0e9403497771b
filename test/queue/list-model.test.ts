/**
 * A RELIABLE queue against a ledger (issue 14's job semantics on issue 12's
 * correctness rules): random enqueues (delayed, keyed, plain), acks, retries
 * (the policy's backoff or their own delay), drops, extends, pauses and
 * resumes through two instances on one manual clock, with watchdog passes as
 * the clock moves. After every step, read atomically: every item is in exactly
 * one place (ready, delayed, processing, dead letters, or acked or dropped by
 * the test), a key repeated within its window answers its first id, a settled
 * token is refused. At the end, resumed and drained, nothing is left behind.
 * Seeded: SWITCHYARD_LIST_MODEL_SEEDS=n runs n seeds (default 2),
 * SWITCHYARD_LIST_MODEL_STEPS the steps of each (default 150).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ManualClock } from "../../src/clock.js";
import type { LeaseSession } from "../../src/client/client.js";
import { below, random } from "../helpers/random.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const SEEDS = Number(process.env.SWITCHYARD_LIST_MODEL_SEEDS ?? 2);
const STEPS = Number(process.env.SWITCHYARD_LIST_MODEL_STEPS ?? 150);
const MAX_DELIVERIES = 4;

let redis: TestRedis;
let instances: TestSwitchyard[];
const clock = new ManualClock();
beforeAll(async () => {
  redis = await startRedis();
  instances = [await startSwitchyard(redis, { clock }), await startSwitchyard(redis, { clock })];
});
afterAll(async () => {
  await Promise.all(instances.map((sy) => sy.stop()));
  await redis.stop();
});

describe("a reliable queue with delays, keys, retries and pauses against a ledger", () => {
  for (let seed = 1; seed <= SEEDS; seed++) {
    it(`seed ${seed}: every item in one place after every step, nothing left once drained`, { timeout: 120_000 }, async () => {
      const next = random(seed);
      const pick = <T>(xs: readonly T[]) => xs[below(next, xs.length)];
      const Q = `{ledger-${seed}}`;
      await instances[0].client.createQueue({
        name: Q, mode: QueueMode.RELIABLE, recoverySet: `${Q}.claims`, minIdle: durationFromMs(10_000), maxDeliveries: MAX_DELIVERIES,
        retryPolicy: { initialBackoff: durationFromMs(1000), multiplier: 2, maxBackoff: durationFromMs(4000), jitter: 0.5 },
      });
      const held = new Map<string, Delivery>();
      const sessions: LeaseSession[] = instances.map((sy) => sy.client.lease(Q, 1 + below(next, 4)));
      const reading = sessions.map(async (s) => {
        for await (const d of s) held.set(d.leaseToken, d);
      });
      const ids = new Set<string>();
      const firstOfKey = new Map<string, string>();
      const settled: string[] = [];
      const history: string[] = [];
      let [acked, dropped, paused] = [0, 0, false];
      const fail = (why: string) => new Error(`seed ${seed}: ${why}; last steps:\n${history.slice(-25).join("\n")}`);
      /** ready, delayed, processing, dead letters: one atomic read. */
      const places = async () => (await redis.plain.multi().llen(Q).zcard(`${Q}.delayed`).llen(`${Q}.processing`).llen(`${Q}.dead`).exec())!.map(([, n]) => Number(n));

      for (let step = 0; step < STEPS; step++) {
        const sy = pick(instances);
        const op = next();
        if (op < 0.25) {
          const items = Array.from({ length: 1 + below(next, 3) }, () => {
            const kind = next();
            if (kind < 0.3) return { payload: "later", delayMs: below(next, 3000) };
            if (kind < 0.5) return { payload: "keyed", idempotencyKey: `key-${below(next, 15)}` };
            return { payload: "now" };
          });
          const got = await sy.client.enqueue(Q, items);
          got.forEach((id, i) => {
            const key = items[i].idempotencyKey;
            if (key && firstOfKey.has(key) && firstOfKey.get(key) !== id) throw fail(`key ${key} answered ${id}, first ${firstOfKey.get(key)}`);
            if (key) firstOfKey.set(key, id);
            ids.add(id);
          });
          history.push(`enqueue ${items.map((it) => it.payload).join(",")} -> ${got.join(",")}`);
        } else if (op < 0.6 && held.size > 0) {
          const [token, d] = pick([...held]);
          held.delete(token);
          if (!ids.has(d.id)) throw fail(`delivered ${d.id}, never enqueued`);
          if (d.deliveryCount > MAX_DELIVERIES) throw fail(`${d.id} delivered ${d.deliveryCount} times`);
          const action = next();
          const done = await (async () => {
            if (action < 0.45) return sy.client.ack(token).then(() => (acked++, "ack"));
            if (action < 0.75) {
              const own = next() < 0.5 ? { delayMs: below(next, 2000) } : {};
              return sy.client.retry(token, { reason: `step ${step}`, ...own }).then((r) => (r.deadLettered ? "retry: dead-lettered" : "retry"));
            }
            if (action < 0.85) return sy.client.drop(token, "dropped").then(() => (dropped++, "drop"));
            return sy.client.extendLease(token).then(() => (held.set(token, d), "extend"));
          })().catch((err: grpc.ServiceError) => {
            // Recovered by the watchdog meanwhile (the clock moved past min_idle): refused, nothing changed.
            if (err.code !== grpc.status.FAILED_PRECONDITION) throw err;
            return `refused (${err.details})`;
          });
          if (!held.has(token)) settled.push(token);
          history.push(`${done} ${d.id} #${d.deliveryCount}`);
        } else if (op < 0.68) {
          paused = !paused;
          await (paused ? sy.client.pauseQueue(Q) : sy.client.resumeQueue(Q));
          history.push(paused ? "pause" : "resume");
        } else if (op < 0.78 && settled.length > 0) {
          const token = pick(settled);
          const err = await sy.client.ack(token).then(() => undefined, (e: grpc.ServiceError) => e);
          if (err?.code !== grpc.status.FAILED_PRECONDITION) throw fail(`a settled token was not refused: ${err?.code ?? "accepted"}`);
          history.push("stale ack refused");
        } else {
          const ms = below(next, 4000);
          await clock.advance(ms);
          history.push(`advance ${ms} ms`);
        }
        const [ready, delayed, processing, dead] = await places();
        if (ready + delayed + processing + dead + acked + dropped !== ids.size) {
          throw fail(`ready ${ready} + delayed ${delayed} + processing ${processing} + dead ${dead} + acked ${acked} + dropped ${dropped} != ${ids.size} enqueued`);
        }
      }

      if (paused) await instances[0].client.resumeQueue(Q);
      // Drain: ack whatever arrives, moving the clock so delayed items come due.
      await expect
        .poll(async () => {
          for (const token of [...held.keys()]) {
            held.delete(token);
            await instances[0].client.ack(token).then(() => acked++, () => undefined);
          }
          await clock.advance(1000);
          const [ready, delayed, processing] = await places();
          return ready + delayed + processing;
        }, { timeout: 30_000 })
        .toBe(0);
      const [, , , dead] = await places();
      expect(dead + acked + dropped).toBe(ids.size);
      await Promise.all(sessions.map((s) => s.close()));
      await Promise.all(reading);
    });
  }
});
