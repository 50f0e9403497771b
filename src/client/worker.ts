/**
 * runWorker: leases from one queue and runs a handler per item, up to
 * `concurrency` at once. Success acks (with the handler's reply, if any); a
 * throw retries, with the error's message as the reason. A lost stream is
 * reopened with backoff until `stop()`; handlers still running from the lost
 * stream count against `concurrency` (the new stream opens with the credit
 * they leave, raised as they finish). A concurrency above the server's
 * SWITCHYARD_MAX_CREDIT runs that many at once, told once to `onError`.
 *
 * A handler still running extends its lease every third of the queue's
 * min_idle (the stream's open answer carries it), so the watchdog never hands
 * a long job to another worker while this one is alive; a worker that dies
 * stops extending, and its items come back.
 *
 * On RELIABLE and STREAM queues the worker also keeps deliveries ready beyond
 * those running, so a handler that finishes starts the next item without
 * waiting a round trip for it: as many as its handlers get through in
 * `prefetchMs` (5 ms) at their average run time, at most `prefetch` (default
 * 4 × concurrency, at least 512) and `prefetchBytes` of payload (16 MiB).
 * Quick handlers get the most from it (a round trip through the server covers
 * many of their items); a long job gains little, and an item is better off
 * with an idle worker elsewhere than waiting behind one here long. Those wait
 * their turn in delivery order, their leases extended like a running
 * handler's; the ones never started go back to the front of the queue,
 * uncounted (LeaseRequest.release), when the worker stops, when the server
 * drains, and when one has waited 20 × prefetchMs with every handler stuck.
 * On a SIMPLE queue (at most once) what is kept ready is in the worker's
 * hands as what runs is: a worker that dies loses both (`prefetch: 0` keeps
 * that to what runs); a stop gives it back. A server too old to take releases
 * gets no more than the worker runs.
 */
import { durationMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { QueueMode, type Delivery, type SettleResult } from "../gen/switchyard/v1/queue_pb.js";
import { systemClock, type Clock } from "../clock.js";
import { SwitchyardClient, type LeaseSession, type Reply } from "./client.js";
import { errorDetails } from "./errors.js";

/** What a handler may return: nothing, or reply items to enqueue with the ack. */
export type HandlerResult = void | { reply: Reply };

/** What a handler knows of its delivery besides the item. */
export interface HandlerContext {
  /** This delivery's number (1 on the first; the item's delivery count). */
  readonly attempt: number;
  /** How often the item has been delivered, this delivery included. */
  readonly deliveryCount: number;
  /** Why the previous delivery failed (a Retry's reason, or the watchdog's); empty on a first delivery. */
  readonly lastError: string;
  /**
   * Fires when the server drains the stream (it is shutting down), the stream is lost, or an extend
   * is refused because the lease is no longer held (its reason is then a {@link SettleError} with
   * `result.reason` LEASE_SUPERSEDED, say): finish up or give up. After a refused extend nothing is
   * settled for this delivery, whatever the handler returns: the item may be someone else's now.
   */
  readonly signal: AbortSignal;
  /** Extends the lease now; resolves to when the watchdog may next recover the item, rejects when the server refused. */
  extend(): Promise<Date>;
}

/** Options for {@link runWorker}. */
export interface WorkerOptions {
  /** A client, or the server's address. */
  client: SwitchyardClient | string;
  queue: string;
  /** STREAM queues: the consumer group to read as. */
  group?: string;
  /** Handlers running at once. */
  concurrency: number;
  /**
   * The most deliveries kept ready beyond the running handlers (the stream's
   * credit is concurrency + those). Default: 4 × concurrency, at least 512
   * (a server's lease call moves at most 256 by default: two of them in flight
   * cover a round trip of quick items, where one left the worker waiting); 0 takes no
   * more than it runs (on a SIMPLE queue, what a worker that dies loses beside
   * its running items). Fewer while handlers are slow (prefetchMs) or payloads
   * large (prefetchBytes).
   */
  prefetch?: number;
  /**
   * How much handler time the deliveries kept ready may add up to: as many as
   * `concurrency` handlers get through in this long, at a moving average of their
   * run times (default 5 ms; at most `prefetch`). Until one has finished, none;
   * handlers averaging over `concurrency × prefetchMs`, none. Infinity: always
   * `prefetch`, from the start.
   */
  prefetchMs?: number;
  /**
   * The most payload bytes the deliveries kept ready may hold, at a moving
   * average of the payloads' sizes (default 16 MiB, as a server's stream buffer).
   */
  prefetchBytes?: number;
  handler: (delivery: Delivery, context: HandlerContext) => Promise<HandlerResult> | HandlerResult;
  /** Told about handler failures, refused extends and lost streams. */
  onError?: (err: unknown, delivery?: Delivery) => void;
  /** The clock the lease extensions and stop()'s grace run on (tests pass a ManualClock). */
  clock?: Clock;
  /** How long stop() waits for running handlers after firing their signals (default 30 s, as the server's shutdown grace). */
  stopGraceMs?: number;
}

/** A running worker. */
export interface Worker {
  /**
   * Stops leasing, gives back the deliveries it fetched ahead and never started
   * (uncounted), fires every running handler's signal, waits for them up to
   * `stopGraceMs`, then closes the stream; resolves to the deliveries whose
   * handlers had not finished (whatever such a handler returns later is not
   * settled; a reliable queue got their items back when the stream closed).
   */
  stop(): Promise<Delivery[]>;
  /** Settles (acks and retries) sent so far; a result that found its stream ended is not counted. */
  readonly processed: number;
}

/** A refused settle (an extend the server answered with an error). */
export class SettleError extends Error {
  constructor(readonly result: SettleResult) {
    super(`${result.reason || `code ${result.code}`}: ${result.message}`);
    this.name = "SettleError";
  }
}

const isThenable = (x: unknown): x is PromiseLike<unknown> => typeof (x as PromiseLike<unknown> | undefined)?.then === "function";

/** How long stop() waits, at least, for the round trip after its credit 0 (see Stream.sync). */
const SYNC_WAIT_MS = 2000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A retry's reason from what the handler threw (the server keeps 1,000 characters). */
const reasonOf = (err: unknown) => (err instanceof Error ? err.message || err.name : String(err)).slice(0, 1000);

/** One open stream as the worker uses it: extends waiting for their answers, and the signal its handlers share. */
class Stream {
  readonly abort = new AbortController();
  /** min_idle of the queue (0: none, no extensions needed). */
  minIdleMs = 0;
  /** The credit this stream was last given. */
  credit = 0;
  /** Deliveries taken ahead of the handlers (0 until the server said it takes back unstarted ones). */
  prefetch = 0;
  /** The highest credit the server accepts (0: not said). */
  maxCredit = 0;
  /** The server takes back deliveries never started (LeaseOpened.releases). */
  releases = false;
  /**
   * A SIMPLE queue's stream: its items left Redis when popped, so its end
   * gives nothing back. What it delivered stays this worker's: handlers keep
   * running (their signal does not fire for it), what waited still starts,
   * and a reply goes by a unary Ack.
   */
  simple = false;
  private readonly extends = new Map<string, ((r: SettleResult | undefined) => void)[]>();

  constructor(readonly session: LeaseSession) {
    session.onSettleResult((r) => this.answer(r.leaseToken, r));
    session.onDrain(() => this.abort.abort(new Error("the server is draining this lease stream")));
    void session.ended.then(() => {
      if (!this.simple) this.abort.abort(new Error("the lease stream ended"));
      for (const token of [...this.extends.keys()]) this.answer(token, undefined);
    });
  }

  private answer(token: string, r: SettleResult | undefined): void {
    const waiting = this.extends.get(token);
    if (!waiting) return;
    this.extends.delete(token);
    for (const fn of waiting) fn(r);
  }

  private syncs = 0;

  /**
   * Resolves once the server has applied every message sent on this stream
   * before (a stopping worker's credit 0: nothing more is on its way after
   * that, and what was is here), or once the stream has ended. It releases a
   * token never issued, which the server answers, refused, in its turn. Only on
   * a stream opened with `releases` (an older server knows no release).
   */
  sync(): Promise<void> {
    const token = `sync.${++this.syncs}`;
    return new Promise((ok) => {
      if (this.session.closed) return ok();
      this.extends.set(token, [() => ok()]);
      this.session.release([token]);
    });
  }

  /** Sends an extend and waits for its settle result (undefined: the stream ended first). */
  extend(token: string): Promise<SettleResult | undefined> {
    if (this.session.closed) return Promise.resolve(undefined);
    return new Promise((ok) => {
      const waiting = this.extends.get(token);
      if (waiting) waiting.push(ok);
      else {
        this.extends.set(token, [ok]);
        this.session.extend(token);
      }
    });
  }
}

/** Refusals that say the item is no longer this worker's: it was recovered (and may be someone else's now) or settled. */
const LOST_LEASE = new Set(["LEASE_SUPERSEDED", "LEASE_NOT_HELD", "LEASE_UNKNOWN"]);

/** One handler's delivery as the worker tracks it. */
interface Job {
  readonly s: Stream;
  readonly d: Delivery;
  /**
   * Fires the handler's signal on its own (a lost lease); the stream's signal fires it too. Made when
   * the signal is first asked for or fired (abortJob): most handlers never ask, and a delivery's way to
   * its handler is shorter without it.
   */
  abort?: AbortController;
  /** Nothing is settled for this delivery: an extend was refused as the lease no longer held, or stop() gave up on it. */
  lost: boolean;
  /** Its handler has finished, or it will never start (given back, or its stream ended while it waited). */
  done: boolean;
  timer?: { cancel(): void };
  /** When it began to wait for a handler (kept ready). */
  readyAt?: number;
  context?: HandlerContext;
}

/** Where a handler's context keeps what its `signal` getter needs; not enumerable, so spreads and JSON leave it out. */
const signalState = Symbol("signalState");
interface SignalState {
  readonly job: Job;
  signal?: AbortSignal;
}

/**
 * Every context's own `signal`: one getter, shared. An object literal's own
 * `get signal()` made every scavenge of a worker keep each context, its job
 * and its delivery until the next mark-compact (at 500 items/s the worker
 * promoted about 0.9 MB per scavenge; bench/README.md, 4 December). The
 * signal is made when a handler first asks for it.
 */
const signalProperty: PropertyDescriptor = {
  enumerable: true,
  get(this: { [signalState]: SignalState }) {
    const state = this[signalState];
    return (state.signal ??= AbortSignal.any([state.job.s.abort.signal, (state.job.abort ??= new AbortController()).signal]));
  },
};

/** Fires `job`'s signal with `reason`, whether or not its handler has asked for it yet. */
function abortJob(job: Job, reason: unknown): void {
  (job.abort ??= new AbortController()).abort(reason);
}

/** A handler's context; `onLost` is told when an extend finds the lease no longer held. */
function contextOf(job: Job, onLost: () => void): HandlerContext {
  const { s, d } = job;
  const context = {
    attempt: d.deliveryCount,
    deliveryCount: d.deliveryCount,
    lastError: d.lastError,
    async extend() {
      const r = await s.extend(d.leaseToken);
      if (!r) throw new Error("the lease stream ended: the item went back to the queue");
      if (r.code !== 0) {
        const err = new SettleError(r);
        if (LOST_LEASE.has(r.reason)) {
          job.lost = true;
          abortJob(job, err);
          onLost();
        }
        throw err;
      }
      return new Date(r.expireTime ? timestampMs(r.expireTime) : 0);
    },
  };
  Object.defineProperty(context, signalState, { value: { job } satisfies SignalState });
  return Object.defineProperty(context, "signal", signalProperty) as typeof context & { readonly signal: AbortSignal };
}

/** Starts a worker; see {@link WorkerOptions}. */
export function runWorker(options: WorkerOptions): Worker {
  const ownClient = typeof options.client === "string";
  const client = typeof options.client === "string" ? new SwitchyardClient(options.client) : options.client;
  const clock = options.clock ?? systemClock;
  // NaN or negative keeps none ready, as prefetchMs and prefetchBytes do (a NaN credit fails to encode and ends the stream).
  const prefetch = Math.max(0, Math.floor(options.prefetch ?? Math.max(512, 4 * options.concurrency)) || 0);
  const prefetchMs = options.prefetchMs ?? 5;
  const prefetchBytes = options.prefetchBytes ?? 16 * 1024 * 1024;
  /** Moving averages of handlers' run times (ms), once one has finished, and of payload sizes, once one has come. */
  let handlerMs: number | undefined;
  let payloadBytes: number | undefined;
  /**
   * Deliveries to keep ready now (see prefetchMs and prefetchBytes), at most `prefetch`: not rounded
   * down, so `timed` can tell an average that moved from one jittering across a whole number.
   */
  const depth = (): number => {
    let n = prefetch;
    if (payloadBytes !== undefined && payloadBytes > 0) n = Math.min(n, prefetchBytes > 0 ? prefetchBytes / payloadBytes : 0);
    if (prefetchMs === Infinity) return n;
    if (handlerMs === undefined || !(prefetchMs > 0)) return 0;
    return handlerMs <= 0 ? n : Math.min(n, (options.concurrency * prefetchMs) / handlerMs);
  };
  let ahead = Math.floor(depth());
  let stopping = false;
  /** The newest stream (it may have ended since). */
  let current: Stream | undefined;
  /** Wakes the loop waiting for a handler to finish (or for stop()). */
  let wake: (() => void) | undefined;
  /** Settles sent on streams that have ended (the current one counts its own). */
  let processedBefore = 0;
  const stopGraceMs = options.stopGraceMs ?? 30_000;
  /** Handlers running, each with the promise that settles when it has finished and been settled. */
  const running = new Map<Job, Promise<void>>();
  /** Deliveries received while every handler slot was taken, in delivery order. */
  const waiting: Job[] = [];

  const settle = (job: Job, result: HandlerResult) => {
    if (job.lost) return;
    if (job.s.simple && job.s.session.closed) {
      // Its stream ended: an ack changes nothing on a SIMPLE queue, but a reply is still enqueued, through any instance.
      if (result?.reply) client.ack(job.d.leaseToken, result.reply).catch((err: unknown) => options.onError?.(err, job.d));
      return;
    }
    job.s.session.ack(job.d.leaseToken, result ? result.reply : undefined);
  };
  const fail = (job: Job, err: unknown) => {
    options.onError?.(err, job.d);
    if (job.lost || (job.s.simple && job.s.session.closed)) return; // a retry changes nothing on a SIMPLE queue
    job.s.session.retry(job.d.leaseToken, { reason: reasonOf(err) });
  };
  const finished = (job: Job) => {
    job.done = true;
    job.timer?.cancel();
  };

  /**
   * Extends the job's lease every third of min_idle until it is done; each
   * extension waits for the server's answer (a ManualClock's advance waits for
   * it too). A refused extension ends them: the item is no longer this worker's
   * (a lost lease also fires the handler's signal, see contextOf).
   */
  const keepExtending = (job: Job) => {
    const s = job.s;
    if (s.minIdleMs <= 0) return;
    const arm = () => {
      job.timer = clock.setTimer(Math.floor(s.minIdleMs / 3), async () => {
        if (job.done || s.session.closed) return;
        try {
          await job.context!.extend();
          if (!job.done) arm();
        } catch (err) {
          if (!job.done && !s.session.closed) options.onError?.(err, job.d);
        }
      });
    };
    arm();
  };

  /**
   * Gives the current stream the credit the handlers it does not hold leave:
   * those still running from a lost stream, or whose lease was lost, count
   * against `concurrency` until they finish (the server freed their credit).
   * Deliveries waiting for a handler are the stream's own: its prefetch covers them.
   */
  const refreshCredit = () => {
    const s = current;
    if (!s || stopping || s.session.closed) return;
    let elsewhere = 0;
    for (const job of running.keys()) if (job.s !== s || job.lost) elsewhere++;
    let credit = Math.max(0, options.concurrency - elsewhere);
    if (credit > 0) credit += Math.min(s.prefetch, ahead);
    if (s.maxCredit > 0) credit = Math.min(credit, s.maxCredit);
    if (credit !== s.credit) s.session.setCredit((s.credit = credit));
  };

  /**
   * Counts a handler's run time into the average and sets the deliveries kept
   * ready by it (and by the payloads' size): from none or to `prefetch` at once, else only when
   * the unrounded depth is more than a quarter away (a credit message per item would cost more
   * than it gains). Rounded down, a depth under 4 moved by one, more than a quarter, whenever a
   * jittery average crossed a whole number: a credit message per item.
   */
  const timed = (startedMs: number) => {
    const ms = clock.now() - startedMs;
    handlerMs = handlerMs === undefined ? ms : handlerMs + (ms - handlerMs) * 0.2;
    const exact = depth();
    const next = Math.floor(exact);
    if (next === ahead) return;
    if (ahead === 0 || next === prefetch || Math.abs(exact - ahead) * 4 > ahead) {
      ahead = next;
      refreshCredit();
    }
  };

  // A handler that returns at once is settled at once: no promise per item.
  const start = (job: Job) => {
    const { s, d } = job;
    const startedMs = clock.now();
    let result: Promise<HandlerResult> | HandlerResult;
    try {
      result = options.handler(d, job.context!);
    } catch (err) {
      finished(job);
      timed(startedMs);
      fail(job, err);
      return;
    }
    if (!isThenable(result)) {
      finished(job);
      timed(startedMs);
      settle(job, result);
      return;
    }
    if (!job.timer) keepExtending(job);
    const p = Promise.resolve(result)
      .then((r) => settle(job, r), (err: unknown) => fail(job, err))
      .finally(() => {
        finished(job);
        timed(startedMs);
        running.delete(job);
        if (s !== current || job.lost) refreshCredit();
        startWaiting();
        wake?.();
      });
    running.set(job, p);
  };

  /** Starts waiting deliveries while handler slots are free; those whose lease or stream is gone are skipped. */
  const startWaiting = () => {
    while (running.size < options.concurrency && waiting.length > 0 && !stopping) {
      const job = waiting.shift()!;
      if (job.lost || job.done || (job.s.session.closed && !job.s.simple)) finished(job);
      else start(job);
    }
  };

  /** Forgets waiting deliveries that will never start. */
  const prune = () => {
    let kept = 0;
    for (const job of waiting) if (!job.done) waiting[kept++] = job;
    waiting.length = kept;
  };

  const handle = (s: Stream, d: Delivery) => {
    const size = d.payload.length;
    payloadBytes = payloadBytes === undefined ? size : payloadBytes + (size - payloadBytes) * 0.2;
    const job: Job = { s, d, lost: false, done: false };
    job.context = contextOf(job, refreshCredit);
    // Once stopping, what can go back waits to (on a server that takes no release, it still runs: it cannot go back).
    if (running.size < options.concurrency && waiting.length === 0 && !(stopping && s.releases)) {
      start(job);
      return;
    }
    job.readyAt = clock.now();
    waiting.push(job);
    keepExtending(job);
    watchWaiting();
  };

  /**
   * Gives back what waits on stream `s` and never started: uncounted, where the
   * server takes them back; else (a server too old to) they stay (they cannot go back).
   */
  const giveBack = (s: Stream, which: (job: Job) => boolean = () => true) => {
    const back = waiting.filter((job) => job.s === s && !job.done && !job.lost && which(job));
    if (back.length === 0 || !s.releases) return;
    for (const job of back) finished(job);
    prune();
    s.session.release(back.map((job) => job.d.leaseToken));
  };

  /**
   * A delivery kept ready that has waited `staleMs` (20 × prefetchMs, 100 ms by
   * default) for a handler goes back, uncounted: every handler is stuck in a run
   * far longer than the average said, and an idle worker elsewhere can take it.
   * None is kept ready then until a handler finishes (its run in the average).
   */
  const staleMs = prefetchMs * 20;
  let sweepTimer: { cancel(): void } | undefined;
  // Only what can go back: its lease still held (giveBack skips a lost one: timed for it, the sweep re-armed at 0 ms
  // without end), on a stream that takes releases and is still open.
  const releasable = (job: Job) => !job.done && !job.lost && job.s.releases && !job.s.session.closed;
  const watchWaiting = () => {
    const oldest = waiting.find(releasable);
    if (sweepTimer || !oldest || !(staleMs > 0 && staleMs < Infinity)) return;
    sweepTimer = clock.setTimer(Math.max(0, oldest.readyAt! + staleMs - clock.now()), () => {
      sweepTimer = undefined;
      if (stopping) return;
      const now = clock.now();
      const stale = (job: Job) => now - job.readyAt! >= staleMs && releasable(job);
      if (waiting.some(stale)) {
        ahead = 0;
        refreshCredit();
        for (const s of new Set(waiting.map((job) => job.s))) giveBack(s, stale);
      }
      watchWaiting();
    });
  };

  // The server's SWITCHYARD_MAX_CREDIT, once an open's answer or a refusal named it: a stream opens
  // within it, so a concurrency above it runs that many at once rather than being refused forever.
  let serverMaxCredit = Infinity;
  const loop = async () => {
    for (let attempt = 0; !stopping; ) {
      // Handlers still running from a lost stream take their share of the concurrency: wait until one is free.
      while (running.size >= options.concurrency && !stopping) await new Promise<void>((ok) => (wake = ok));
      wake = undefined;
      if (stopping) break;
      const credit = Math.min(options.concurrency - running.size, serverMaxCredit);
      let again = false;
      const s = (current = new Stream(client.lease(options.queue, credit, { group: options.group })));
      s.credit = credit;
      // The server is shutting down: what never started goes to a worker of another instance now.
      s.session.onDrain(() => void giveBack(s));
      try {
        const opened = await s.session.opened;
        s.minIdleMs = opened.minIdle ? durationMs(opened.minIdle) : 0;
        s.maxCredit = opened.maxCredit;
        if (opened.maxCredit > 0) serverMaxCredit = opened.maxCredit;
        s.releases = opened.releases;
        s.simple = opened.mode === QueueMode.SIMPLE;
        if (opened.releases && !s.session.drained) {
          s.prefetch = prefetch;
          refreshCredit();
        }
        attempt = 0;
        for (let batch = await s.session.nextBatch(); batch.length > 0; batch = await s.session.nextBatch()) {
          for (const d of batch) handle(s, d);
          if (s.session.drained || stopping) giveBack(s);
        }
        const err = await s.session.ended;
        if (err && !stopping) options.onError?.(err);
      } catch (err) {
        const max = creditLimit(err, credit);
        if (max !== undefined) {
          // Told once; the next stream opens at once, within the limit.
          if (serverMaxCredit === Infinity && !stopping) {
            options.onError?.(new Error(`runWorker: concurrency ${options.concurrency} is above the server's SWITCHYARD_MAX_CREDIT (${max}): at most ${max} items run at once`, { cause: err }));
          }
          serverMaxCredit = max;
          again = true;
        } else if (!stopping) options.onError?.(err);
      }
      await s.session.ended;
      // The server returned what waited on it when the stream ended (a SIMPLE queue's cannot go back: it still runs here).
      if (!s.simple) for (const job of waiting) if (job.s === s) finished(job);
      prune();
      startWaiting();
      processedBefore += s.session.settlesSent;
      current = undefined;
      if (!stopping && !again) await sleep(Math.min(100 * 2 ** attempt++, 5000));
    }
  };
  const done = loop();

  return {
    get processed() {
      return processedBefore + (current?.session.settlesSent ?? 0);
    },
    async stop() {
      stopping = true;
      sweepTimer?.cancel();
      wake?.();
      const s = current;
      s?.session.setCredit(0);
      if (s) giveBack(s);
      // Deliveries the server sent before it took the credit 0 may still be on their way: closing before
      // they arrive would have the server return them counted, though no handler saw them. A round trip
      // after the credit 0 brings them, and the loop gives them back (once stopping, nothing starts them).
      const synced = s?.session.opened.then((o) => (o.releases ? s.sync() : undefined), () => undefined);
      const stopped = new Error("the worker is stopping");
      for (const job of running.keys()) abortJob(job, stopped);
      let grace: { cancel(): void } | undefined;
      await Promise.race([Promise.all(running.values()), new Promise<void>((ok) => (grace = clock.setTimer(stopGraceMs, () => ok())))]);
      grace?.cancel();
      const unfinished = [...running.keys()].map((job) => job.d);
      // Their results are not settled: the stream closes now, and its items go back to the queue.
      for (const job of running.keys()) job.lost = true;
      // Deliveries that could not be given back (the server takes no release) and never ran.
      for (const job of waiting) {
        if (!job.done) unfinished.push(job.d);
        finished(job);
      }
      waiting.length = 0;
      // A server that answers nothing holds the stop no longer than the grace (and at least a round trip's allowance).
      let syncGrace: { cancel(): void } | undefined;
      await Promise.race([synced, new Promise<void>((ok) => (syncGrace = clock.setTimer(Math.max(stopGraceMs, SYNC_WAIT_MS), () => ok())))]);
      syncGrace?.cancel();
      // Let the settles and releases written above (the loop's for what the round trip brought) reach the server before the stream ends.
      await new Promise((r) => setImmediate(r));
      await current?.session.close();
      await done;
      if (ownClient) client.close();
      return unfinished;
    },
  };
}

/** The server's credit limit when `err` refused an open for `credit` above it (queues.ts checkCredit names it), else undefined. */
function creditLimit(err: unknown, credit: number): number | undefined {
  const details = errorDetails(err);
  const max = Number(details?.metadata.max_credit);
  return details?.reason === "INVALID_FIELD" && Number.isInteger(max) && max >= 1 && max < credit ? max : undefined;
}
