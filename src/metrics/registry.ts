/**
 * Switchyard's Prometheus metrics (prom-client), one registry per instance.
 * The domain reports through the {@link Metrics} and {@link GrpcMetrics}
 * hooks; queue gauges are read from Redis when Prometheus scrapes.
 *
 * Names follow Prometheus conventions: a `switchyard_` prefix (the gRPC
 * server metrics keep go-grpc-prometheus's names so existing dashboards work),
 * base units (seconds), `_total` on counters.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { Logger } from "../log.js";
import type { QueueStatsView } from "../queue/queues.js";
import type { GrpcMetrics, ItemEvent, LockResult, Metrics, RunOutcome, SkipReason } from "./hooks.js";

/** Where the queue gauges come from on each scrape. */
export interface QueueSource {
  /** Names of the declared queues. */
  names(): string[];
  stats(name: string): Promise<QueueStatsView>;
  /** True while Redis answers. */
  redisReady(): boolean;
}

/** Queues read per scrape at most (in name order); the rest are left out of the gauges. */
export const MAX_SCRAPED_QUEUES = 1000;
/** Queues read from Redis at once during a scrape. */
const SCRAPE_CONCURRENCY = 16;
/** A scrape stops reading queues after this long and reports what it has. */
const SCRAPE_BUDGET_MS = 5000;

const itemEvents: readonly ItemEvent[] = ["enqueued", "leased", "acked", "retried", "dropped", "returned", "recovered", "dead_lettered", "trimmed"];

const itemHelp: Record<ItemEvent, string> = {
  enqueued: "Items written to a queue (Enqueue, ack replies, queue job targets).",
  leased: "Items delivered to workers on lease streams.",
  acked: "Deliveries acknowledged.",
  retried: "Deliveries returned to the back of their queue for another attempt.",
  dropped: "Deliveries dropped without success.",
  returned: "Deliveries returned to the front of their queue because their lease stream ended.",
  recovered: "Claims idle longer than min_idle returned to their queue by the watchdog.",
  dead_lettered: "Items moved to the dead-letter list after max_deliveries.",
  trimmed: "Stream entries trimmed from their stream while pending (unsettled), found by a lease call's reclaim: lost to their group.",
};

/** The metrics of one Switchyard instance. */
export class PromMetrics implements Metrics, GrpcMetrics {
  readonly registry = new Registry();
  private readonly runs: Counter<"outcome">;
  private readonly skipped: Counter<"reason">;
  private readonly locks: Counter<"result">;
  private readonly grpcStarted: Counter<"grpc_service" | "grpc_method" | "grpc_type">;
  private readonly grpcHandled: Counter<"grpc_service" | "grpc_method" | "grpc_type" | "grpc_code">;
  /** Counts on the per-message paths, added to their counters when those are read. */
  private readonly itemCounts: Record<ItemEvent, PendingCounts<"queue">>;
  private readonly receivedCounts = new PendingCounts<GrpcLabel>();
  private readonly sentCounts = new PendingCounts<GrpcLabel>();
  private readonly grpcSeconds: Histogram<"grpc_service" | "grpc_method" | "grpc_type">;
  private readonly queueGauges: Record<"ready" | "processing" | "deadLetter" | "claimAge" | "streams", Gauge<"queue">>;
  private readonly groupGauges: Record<"pending" | "lag" | "idle" | "consumers", Gauge<"queue" | "group">>;
  private readonly declared: Gauge;
  private readonly redisUp: Gauge;
  private readonly scrapeErrors: Counter;

  constructor(options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry];
    // The event-loop delay histogram (nodejs_eventloop_lag_*) samples every 100 ms, not prom-client's
    // 10: its timer woke every instance 100 times a second, idle or not (an idle server's CPU 8 ms
    // a second on a 2-vCPU VM against 3–5; bench/README.md, 5 December). Every stall of 100 ms or
    // more still shows.
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 100 });
    const counter = <L extends string>(name: string, help: string, labelNames: L[], pending?: PendingCounts<L>) =>
      new Counter<L>({ name, help, labelNames, registers, ...(pending && { collect: pending.collector() }) });
    const gauge = (name: string, help: string) => new Gauge<"queue">({ name, help, labelNames: ["queue"], registers });
    this.itemCounts = Object.fromEntries(itemEvents.map((e) => [e, new PendingCounts<"queue">()])) as Record<ItemEvent, PendingCounts<"queue">>;
    for (const e of itemEvents) counter(`switchyard_items_${e}_total`, itemHelp[e], ["queue"], this.itemCounts[e]);
    this.runs = counter("switchyard_job_runs_total", "Cron and interval job runs (scheduled, catch-up and RunOnce) by outcome.", ["outcome"]);
    this.skipped = counter(
      "switchyard_job_ticks_skipped_total",
      "Ticks that did not run, by reason: overlap, lock_held, misfire, paused, unpublished, claim_failed (the claim itself failed).",
      ["reason"],
    );
    this.locks = counter(
      "switchyard_job_lock_acquisitions_total",
      "Attempts to take a job's execution lock (acquired, contended: another run holds it) and locks lost while running (lost).",
      ["result"],
    );
    const grpcLabels = ["grpc_service", "grpc_method", "grpc_type"] as const;
    this.grpcStarted = counter("grpc_server_started_total", "gRPC calls started on the server.", [...grpcLabels]);
    this.grpcHandled = counter("grpc_server_handled_total", "gRPC calls completed on the server, by status code.", [...grpcLabels, "grpc_code"]);
    counter("grpc_server_msg_received_total", "gRPC messages received on the server (each message of a stream).", [...grpcLabels], this.receivedCounts);
    counter("grpc_server_msg_sent_total", "gRPC messages sent by the server (each message of a stream).", [...grpcLabels], this.sentCounts);
    this.grpcSeconds = new Histogram({
      name: "grpc_server_handling_seconds",
      help: "Time from a gRPC call's start to its status (lease streams: the stream's whole life).",
      labelNames: [...grpcLabels],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    });
    this.queueGauges = {
      ready: gauge("switchyard_queue_ready_items", "Items waiting in the queue list."),
      processing: gauge("switchyard_queue_processing_items", "Items leased and not yet settled (reliable queues)."),
      deadLetter: gauge("switchyard_queue_dead_letter_items", "Items in the dead-letter list (reliable queues)."),
      claimAge: gauge("switchyard_queue_oldest_claim_age_seconds", "Age of the oldest claim in the recovery set (queues with one)."),
      streams: gauge("switchyard_queue_lease_streams", "Lease streams open on this instance."),
    };
    const groupGauge = (name: string, help: string) => new Gauge<"queue" | "group">({ name, help, labelNames: ["queue", "group"], registers });
    this.groupGauges = {
      pending: groupGauge("switchyard_stream_group_pending_entries", "Entries delivered to a consumer group of a stream queue and not yet acknowledged."),
      lag: groupGauge("switchyard_stream_group_lag_entries", "Entries of a stream queue not yet delivered to the consumer group."),
      idle: groupGauge("switchyard_stream_group_oldest_pending_idle_seconds", "How long the group's oldest pending entry has been idle."),
      consumers: groupGauge("switchyard_stream_group_consumers", "Consumers a group of a stream queue knows."),
    };
    this.declared = new Gauge({ name: "switchyard_queues_declared", help: "Declared queues.", registers });
    this.redisUp = new Gauge({ name: "switchyard_redis_up", help: "1 while Redis answers, else 0.", registers });
    this.scrapeErrors = new Counter({
      name: "switchyard_queue_stats_errors_total",
      help: "Queues whose gauges could not be read from Redis during a scrape.",
      registers,
    });
  }

  items(queue: string, event: ItemEvent, count = 1): void {
    this.itemCounts[event].add(queue, "", () => ({ queue }), count);
  }

  jobRun(outcome: RunOutcome): void {
    this.runs.inc({ outcome });
  }

  tickSkipped(reason: SkipReason): void {
    this.skipped.inc({ reason });
  }

  jobLock(result: LockResult): void {
    this.locks.inc({ result });
  }

  started(service: string, method: string, type: string): void {
    this.grpcStarted.inc({ grpc_service: service, grpc_method: method, grpc_type: type });
  }

  handled(service: string, method: string, type: string, code: string, seconds: number): void {
    const labels = { grpc_service: service, grpc_method: method, grpc_type: type };
    this.grpcHandled.inc({ ...labels, grpc_code: code });
    this.grpcSeconds.observe(labels, seconds);
  }

  received(service: string, method: string, type: string): void {
    this.receivedCounts.add(service, method, () => grpcLabelsOf(service, method, type), 1);
  }

  sent(service: string, method: string, type: string): void {
    this.sentCounts.add(service, method, () => grpcLabelsOf(service, method, type), 1);
  }

  /** A gauge whose value is read from `read` on each scrape (bytes an instance holds, say). */
  sample(name: string, help: string, read: () => number): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** The text exposition, with the queue gauges read from `source` first. */
  async scrape(source: QueueSource | undefined, log: Logger): Promise<string> {
    if (source) await this.readQueues(source, log);
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  private async readQueues(source: QueueSource, log: Logger): Promise<void> {
    for (const g of Object.values(this.queueGauges)) g.reset();
    for (const g of Object.values(this.groupGauges)) g.reset();
    const up = source.redisReady();
    this.redisUp.set(up ? 1 : 0);
    const names = source.names().sort().slice(0, MAX_SCRAPED_QUEUES);
    this.declared.set(source.names().length);
    if (!up) return;
    const deadline = Date.now() + SCRAPE_BUDGET_MS;
    for (let i = 0; i < names.length && Date.now() < deadline; i += SCRAPE_CONCURRENCY) {
      const batch = names.slice(i, i + SCRAPE_CONCURRENCY);
      const results = await Promise.allSettled(batch.map((name) => source.stats(name)));
      results.forEach((r, j) => {
        if (r.status === "fulfilled") this.setQueue(r.value);
        else {
          this.scrapeErrors.inc();
          log.debug("could not read a queue's gauges", { queue: batch[j], err: r.reason });
        }
      });
    }
  }

  private setQueue(s: QueueStatsView): void {
    const labels = { queue: s.queue };
    const g = this.queueGauges;
    g.ready.set(labels, s.ready);
    g.processing.set(labels, s.processing);
    g.deadLetter.set(labels, s.deadLetter);
    if (s.oldestClaimAgeMs !== undefined) g.claimAge.set(labels, s.oldestClaimAgeMs / 1000);
    g.streams.set(labels, s.leaseStreams);
    for (const group of s.groups) {
      const l = { queue: s.queue, group: group.name };
      this.groupGauges.pending.set(l, group.pending);
      if (group.lag !== undefined) this.groupGauges.lag.set(l, group.lag);
      if (group.oldestPendingIdleMs !== undefined) this.groupGauges.idle.set(l, group.oldestPendingIdleMs / 1000);
      this.groupGauges.consumers.set(l, group.consumers);
    }
  }
}

type GrpcLabel = "grpc_service" | "grpc_method" | "grpc_type";

const grpcLabelsOf = (service: string, method: string, type: string) => ({ grpc_service: service, grpc_method: method, grpc_type: type });

/**
 * Counts kept as plain numbers by key, and added to their counter when it is
 * read (a scrape runs each counter's collect first). Items and messages are
 * counted on every call of the hot paths, where prom-client would hash and
 * check the labels each time; here that happens once per key and scrape.
 * A pair of keys stands for one set of labels: a queue (and ""), or a service
 * and one of its methods (whose type follows from it). Two levels, not one
 * joined key, so that no string is built per count.
 */
class PendingCounts<L extends string> {
  private readonly counts = new Map<string, Map<string, { labels: Partial<Record<L, string>>; n: number; shown: boolean }>>();

  /** Adds `n` under `key` and `sub`; `labels` are made the first time the pair is seen. */
  add(key: string, sub: string, labels: () => Partial<Record<L, string>>, n: number): void {
    // Refused here, as prom-client's inc would: at the scrape, it would fail every scrape after.
    if (!(n >= 0 && n < Infinity)) throw new TypeError(`a count must be a finite number, not negative: ${n}`);
    let counts = this.counts.get(key);
    if (!counts) this.counts.set(key, (counts = new Map()));
    const count = counts.get(sub);
    if (count) count.n += n;
    else counts.set(sub, { labels: labels(), n, shown: false });
  }

  /** A counter's collect: moves what was added since into it (a pair first counted 0 shows as 0). */
  collector(): (this: Counter<L>) => void {
    const all = this.counts;
    return function (this: Counter<L>) {
      for (const counts of all.values()) {
        for (const count of counts.values()) {
          if (count.n === 0 && count.shown) continue;
          this.inc(count.labels, count.n);
          count.n = 0;
          count.shown = true;
        }
      }
    };
  }
}
