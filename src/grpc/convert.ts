/** Conversions between protobuf messages and domain values. */
import { create } from "@bufbuild/protobuf";
import { DurationSchema, timestampFromMs, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { invalid } from "../errors.js";
import {
  QueueMode,
  QueueSchema,
  type Queue,
  type RetryPolicy,
} from "../gen/switchyard/v1/queue_pb.js";
import type { QueueConfig, QueueSpec } from "../queue/declaration.js";

/** The largest Duration protobuf allows: 10,000 years. */
const MAX_DURATION_SECONDS = 315_576_000_000n;

/** Whole milliseconds in a Duration (rounded up), or undefined when it is unset. */
export function durationMs(name: string, d: Duration | undefined): number | undefined {
  if (!d) return undefined;
  if (d.seconds < 0n || d.nanos < 0) throw invalid(`${name} must not be negative`, name);
  if (d.seconds > MAX_DURATION_SECONDS || d.nanos > 999_999_999) {
    throw invalid(`${name} is out of range: at most ${MAX_DURATION_SECONDS} seconds, nanos below 1e9`, name);
  }
  return Number(d.seconds) * 1000 + Math.ceil(d.nanos / 1e6);
}

/** A Duration of `ms` milliseconds. */
export function msDuration(ms: number): Duration {
  const whole = Math.floor(ms / 1000);
  return create(DurationSchema, { seconds: BigInt(whole), nanos: Math.round((ms - whole * 1000) * 1e6) });
}

/** A Timestamp at `ms` since the epoch, or undefined for 0/undefined. */
export function msTimestamp(ms: number | undefined): Timestamp | undefined {
  return ms ? timestampFromMs(ms) : undefined;
}

/** proto3's 0 as unset; NaN stays, for the declaration's check to refuse (`|| undefined` would make it the default). */
const setNumber = (x: number) => (x === 0 ? undefined : x);

/** A caller's retry policy as a domain one (unset fields take the defaults). */
function retryPolicy(p: RetryPolicy | undefined): QueueSpec["retryPolicy"] {
  if (!p) return undefined;
  return {
    initialMs: durationMs("retry_policy.initial_backoff", p.initialBackoff),
    multiplier: setNumber(p.multiplier),
    maxMs: durationMs("retry_policy.max_backoff", p.maxBackoff),
    jitter: setNumber(p.jitter),
  };
}

const modes = new Map<QueueMode, QueueConfig["mode"]>([[QueueMode.SIMPLE, "simple"], [QueueMode.RELIABLE, "reliable"], [QueueMode.STREAM, "stream"]]);

/** A queue mode as the API names it. */
export function modeMessage(mode: QueueConfig["mode"]): QueueMode {
  return mode === "simple" ? QueueMode.SIMPLE : mode === "reliable" ? QueueMode.RELIABLE : QueueMode.STREAM;
}

/** A caller's declaration as a domain spec. */
export function queueSpec(queue: Queue | undefined): QueueSpec {
  if (!queue) throw invalid("queue is required", "queue");
  const mode = modes.get(queue.mode);
  return {
    name: queue.name,
    mode,
    processingList: queue.processingList || undefined,
    recoverySet: queue.recoverySet || undefined,
    minIdleMs: durationMs("min_idle", queue.minIdle),
    recoveryTtlMs: durationMs("recovery_ttl", queue.recoveryTtl),
    maxDeliveries: queue.maxDeliveries || undefined,
    deadLetterList: queue.deadLetterList || undefined,
    retryPolicy: retryPolicy(queue.retryPolicy),
    idempotencyWindowMs: durationMs("idempotency_window", queue.idempotencyWindow),
    publishTtlMs: durationMs("publish_ttl", queue.publishTtl),
    replyQueue: queue.replyQueue || undefined,
    groups: queue.groups.length ? queue.groups.map((g) => ({ name: g.name, startId: g.startId || undefined })) : undefined,
    streamTrim: queue.streamTrim
      ? { maxLen: Number(queue.streamTrim.maxLen), maxAgeMs: durationMs("stream_trim.max_age", queue.streamTrim.maxAge) }
      : undefined,
  };
}

/** A stored declaration as the API shows it. */
export function queueMessage(config: QueueConfig): Queue {
  const reliable = config.mode !== "simple";
  const trim = config.streamTrim;
  return create(QueueSchema, {
    name: config.name,
    mode: modeMessage(config.mode),
    processingList: config.processingList,
    recoverySet: config.recoverySet,
    minIdle: config.minIdleMs ? msDuration(config.minIdleMs) : undefined,
    recoveryTtl: config.recoveryTtlMs ? msDuration(config.recoveryTtlMs) : undefined,
    maxDeliveries: config.maxDeliveries,
    deadLetterList: config.deadLetterList,
    createTime: msTimestamp(config.createTimeMs),
    retryPolicy: reliable
      ? {
          initialBackoff: msDuration(config.retryPolicy.initialMs),
          multiplier: config.retryPolicy.multiplier,
          maxBackoff: msDuration(config.retryPolicy.maxMs),
          jitter: config.retryPolicy.jitter,
        }
      : undefined,
    idempotencyWindow: msDuration(config.idempotencyWindowMs),
    paused: config.paused,
    publishTtl: config.publishTtlMs ? msDuration(config.publishTtlMs) : undefined,
    replyQueue: config.replyQueue,
    groups: config.groups.map((g) => ({ name: g.name })),
    streamTrim: trim.maxLen || trim.maxAgeMs ? { maxLen: BigInt(trim.maxLen), maxAge: trim.maxAgeMs ? msDuration(trim.maxAgeMs) : undefined } : undefined,
  });
}
