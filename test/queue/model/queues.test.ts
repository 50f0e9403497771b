/**
 * Model-based tests of reliable and simple queues (issue 12, SPEC Q14; issue
 * 14's delays, retries with a delay, pause and resume): seeded histories of
 * random steps against real Redis and real Switchyard instances on one
 * ManualClock, each checked against the reference model (model.ts) after
 * every step.
 *
 * Steps: enqueue (some items delayed; or none, through an instance serving
 * the queue, whose push may carry its pump's lease), raw LPUSH by a plain Redis client
 * (equal values, non-UTF-8 bytes, values that look like a derived claim);
 * Lease streams on up to three instances with various credits; credit
 * changes; ack, retry (the policy's backoff, or a delay of its own), drop and
 * extend, on the stream or unary through any instance; release of some a
 * stream holds (back to the front, uncounted); stale tokens (settled,
 * returned, recovered, released, reaped, of a deleted queue); stream close and cancel;
 * instance kill (its link to Redis down for good, nothing returned), graceful
 * stop and restart; a cut of instances' Redis connections right after a push;
 * an outage of one instance's Redis while its streams end (their returns wait);
 * a lease whose answer is lost (its connection reset after the script went out);
 * clock advances (watchdog, reaping of dead instances, the delayed mover);
 * a long handler whose extend keeps its item past min_idle;
 * pause and resume; purge; delete with purge and declare again. A history
 * ends quiet: streams closed, the clock advanced past every timeout, and
 * nothing may be left in processing. Besides the model's checks (model.ts),
 * every look checks SPEC Q8's progress: a stream with open credit gets items
 * while its queue has ready ones.
 *
 * Two mixes of steps: the usual one, where streams mostly hold all their
 * credit, and a trickle (few items, many settles), where pumps mostly wait
 * and an enqueue through the serving instance carries its pump's lease.
 *
 * `npm test` runs 3 histories of 40 steps of each mix; SWITCHYARD_MODEL_RUNS and
 * SWITCHYARD_MODEL_STEPS run more, SWITCHYARD_MODEL_MIX=usual|trickle one mix,
 * SWITCHYARD_MODEL_SEED=n runs seed n (with
 * SWITCHYARD_MODEL_RUNS, seeds from n on; the
 * steps drawn follow from the seed and what the system did; a failure prints
 * the history it ran; SWITCHYARD_MODEL_PRINT=1 prints every history).
 */
import { afterAll, beforeAll, describe, it } from "vitest";
import { ManualClock } from "../../../src/clock.js";
import { random } from "../../helpers/random.js";
import { startStandaloneRedis, type StandaloneRedis } from "../../helpers/redis.js";
import { Model } from "./model.js";
import { INSTANCE_TIMEOUT_MS, WATCHDOG_MS, World, killed } from "./world.js";
import { FIRST_SEED, MIN_IDLE_MS, ModelFailure, QUEUES, RUNS, STEPS, declarations, openSessions, queueModels, settle, step, summary, type Run } from "./run.js";
import { credit, endSession, enqueue, giveBack, open, quiet, rawPush, release, settleOne, stale } from "./items.js";
import { advance, cut, kill, longHandler, lostLease, outage, pauseOrResume, purge, redeclare, restart, stop } from "./faults.js";

type Step = (r: Run) => Promise<string | undefined>;
/** Step weights: the usual mix, where streams are mostly full, and a trickle, where pumps mostly wait and a push carries their lease. */
const mixes: Record<"usual" | "trickle", [number, Step][]> = {
  usual: [
    [3, (r) => enqueue(r)], [2, (r) => enqueue(r, true)], [3, (r) => rawPush(r)], [3, open], [1, credit], [9, settleOne], [2, stale], [1.5, release], [1, endSession],
    [0.4, kill], [0.4, stop], [1, restart], [1, cut], [0.7, outage], [1, lostLease], [3, (r) => advance(r)], [1, longHandler], [1, pauseOrResume], [0.4, purge], [0.2, redeclare],
  ],
  trickle: [
    [0.5, (r) => enqueue(r)], [5, (r) => enqueue(r, true)], [0.5, (r) => rawPush(r)], [2, open], [1, credit], [12, settleOne], [1, stale], [1, release], [0.5, endSession],
    [0.3, kill], [0.3, stop], [1, restart], [1, cut], [0.5, outage], [1, lostLease], [2, (r) => advance(r)], [0.5, longHandler], [0.3, pauseOrResume], [0.2, purge], [0.1, redeclare],
  ],
};

async function randomStep(r: Run, steps: [number, Step][]): Promise<string> {
  const totalWeight = steps.reduce((a, [w]) => a + w, 0);
  for (;;) {
    let x = r.next() * totalWeight;
    const [, fn] = steps.find(([w]) => (x -= w) < 0) ?? steps[steps.length - 1];
    const done = await fn(r);
    if (done) return done;
  }
}

/** Ends a history quietly: an instance up, queues resumed, streams closed, the clock past every timeout; nothing may stay in processing. */
async function windDown(r: Run): Promise<void> {
  if (r.world.live().length === 0) step(r, (await restart(r))!);
  for (const q of r.model.queues.values()) {
    if (!q.paused) continue;
    q.paused = false;
    await r.world.live()[0].sy.client.resumeQueue(q.name);
    step(r, `resume ${q.name}`);
  }
  const open = openSessions(r);
  await quiet(r, open);
  giveBack(r, open, "stream closed");
  await Promise.all(open.map((s) => s.lease.close()));
  step(r, `close sessions ${open.map((s) => s.id).join(", ") || "(none)"}`);
  await settle(r);
  for (let t = 0; t < INSTANCE_TIMEOUT_MS + MIN_IDLE_MS + 8000 + 4 * WATCHDOG_MS; t += 2000) {
    step(r, await advance(r, 2000));
    await settle(r);
  }
  const left = r.model.items.filter((i) => !["ready", "delayed", "dead", "gone"].includes(i.place));
  if (left.length > 0) throw new ModelFailure(`once quiet, items are still ${left.map((i) => `${r.model.describe(i)} ${i.place}`).join(", ")}`);
  const snaps = await r.world.snapshot(QUEUES);
  for (const [name, snap] of snaps) {
    if (snap.processing.length + snap.records.size + snap.claims.size + snap.live > 0) {
      throw new ModelFailure(`once quiet, "${name}" still has ${snap.processing.length} in processing, ${snap.records.size} records, ${snap.claims.size} claims, live ${snap.live}`);
    }
  }
}

let redis: StandaloneRedis;
beforeAll(async () => {
  redis = await startStandaloneRedis();
});
afterAll(async () => {
  await Promise.all(killed);
  await redis?.stop();
});

async function runHistory(seed: number, mix: keyof typeof mixes): Promise<void> {
  await redis.flushAll();
  const clock = new ManualClock();
  const world = new World(redis, clock);
  const r: Run = {
    seed, next: random(seed), world, model: new Model(queueModels()), history: [], t0: clock.now(),
    pending: [], refusals: new Map(), extends: new Map(), sent: new Map(), answerLost: new Set(), seen: new Map(), hard: [], delivered: 0, redelivered: 0,
  };
  try {
    const first = await world.start(0);
    for (const q of QUEUES) await first.sy.client.createQueue(declarations[q]);
    await world.start(1);
    step(r, `start ${world.instances.map((i) => i!.name).join(", ")}; declare ${QUEUES.join(", ")}`);
    for (let n = 0; n < STEPS; n++) {
      const text = await randomStep(r, mixes[mix]);
      step(r, text);
      await settle(r);
    }
    await windDown(r);
    if (process.env.SWITCHYARD_MODEL_PRINT) console.log(`queue model, ${mix} seed ${seed}: ${summary(r)}\n${r.history.join("\n")}`);
  } catch (err) {
    const why = err instanceof ModelFailure ? err.message : String((err as Error).stack ?? err);
    throw new Error(
      `queue model, ${mix} seed ${seed}: after step ${r.history.length}:\n${why}\n\n` +
        `history (rerun: SWITCHYARD_MODEL_MIX=${mix} SWITCHYARD_MODEL_SEED=${seed} npx vitest run test/queue/model):\n${r.history.join("\n")}`,
    );
  } finally {
    await world.close();
  }
}

const only = process.env.SWITCHYARD_MODEL_MIX as keyof typeof mixes | undefined;
describe("queues against the model (SPEC Q14)", () => {
  for (const mix of only ? [only] : (Object.keys(mixes) as (keyof typeof mixes)[])) {
    for (let seed = FIRST_SEED; seed < FIRST_SEED + RUNS; seed++) {
      it(`${mix} history ${seed}: ${STEPS} steps`, () => runHistory(seed, mix), 30_000 + STEPS * 2000);
    }
  }
});
