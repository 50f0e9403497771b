/**
 * What the domain modules report for metrics: a small interface with no
 * Prometheus in it. src/metrics/registry.ts implements it with prom-client;
 * app.ts injects it; without one, nothing is counted.
 */

/** Things that happen to queue items, each counted per queue. */
export type ItemEvent =
  /** Written to a queue by Enqueue, an ack's replies or a queue job target. */
  | "enqueued"
  /** Sent to a worker on a lease stream. */
  | "leased"
  /** Settled: removed after success. */
  | "acked"
  /** Settled: back to the queue for another attempt. */
  | "retried"
  /** Settled: removed without success. */
  | "dropped"
  /** Returned to the front of the queue because the stream holding it ended. */
  | "returned"
  /** Returned to the queue by the watchdog after min_idle. */
  | "recovered"
  /** Moved to the dead-letter list (by retry, a returned stream or the watchdog). */
  | "dead_lettered"
  /** Stream entries trimmed from their stream (by its trimming policy) while pending, found by a lease call: lost to their group. */
  | "trimmed";

/** The outcome of a cron run. */
export type RunOutcome = "succeeded" | "failed";

/** Why a claimed tick did not run. */
export type SkipReason = "overlap" | "lock_held" | "misfire" | "paused" | "unpublished" | "claim_failed";

/** The result of an attempt to take, or keep, a job's execution lock. */
export type LockResult = "acquired" | "contended" | "lost";

/** The hooks the domain calls. Each must be cheap and must never throw. */
export interface Metrics {
  items(queue: string, event: ItemEvent, count?: number): void;
  jobRun(outcome: RunOutcome): void;
  tickSkipped(reason: SkipReason): void;
  jobLock(result: LockResult): void;
}

/** Counts nothing: the default where no metrics are wired. */
export const noMetrics: Metrics = {
  items: () => undefined,
  jobRun: () => undefined,
  tickSkipped: () => undefined,
  jobLock: () => undefined,
};

/** What the gRPC layer reports for every call (labels follow go-grpc-prometheus). */
export interface GrpcMetrics {
  /** A call began. `type` is unary, client_stream, server_stream or bidi_stream. */
  started(service: string, method: string, type: string): void;
  /** A call ended with `code` (the Go name: OK, NotFound, …) after `seconds`. */
  handled(service: string, method: string, type: string, code: string, seconds: number): void;
  /** A call received one message (an EnqueueStream request, a Lease settle, a unary request). */
  received(service: string, method: string, type: string): void;
  /** A call sent one message. */
  sent(service: string, method: string, type: string): void;
}
