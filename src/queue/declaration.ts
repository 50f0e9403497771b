/**
 * Queue declarations: what a caller may ask for (QueueSpec), how it is
 * validated, and what is stored (QueueConfig). Validation refuses, with a
 * message that says what to change, anything that would not work on Redis
 * Cluster too (SPEC Q2, Q5, Q7).
 */
import { invalid } from "../errors.js";
import { defaultDeadLetter, defaultProcessing, hashTag, queueKeys, allKeys, slotOf, type QueueKeys } from "../redis/keys.js";

/** How items leave a queue. */
export type QueueMode = "simple" | "reliable";

/** A declaration as a caller gives it; unset fields take defaults. */
export interface QueueSpec {
  name: string;
  mode?: QueueMode;
  processingList?: string;
  recoverySet?: string;
  minIdleMs?: number;
  recoveryTtlMs?: number;
  maxDeliveries?: number;
  deadLetterList?: string;
}

/** A validated, stored declaration with every default filled in. */
export interface QueueConfig {
  readonly name: string;
  readonly mode: QueueMode;
  /** Reliable only ("" for simple queues). */
  readonly processingList: string;
  /** "" when the queue has no recovery set. */
  readonly recoverySet: string;
  /** 0 without a recovery set. */
  readonly minIdleMs: number;
  /** 0: the recovery set never expires. */
  readonly recoveryTtlMs: number;
  /** Reliable only (0 for simple queues). */
  readonly maxDeliveries: number;
  /** Reliable only ("" for simple queues). */
  readonly deadLetterList: string;
  readonly createTimeMs: number;
}

/** Deliveries after which a failing item is dead-lettered, unless the declaration says otherwise. */
export const DEFAULT_MAX_DELIVERIES = 25;
const MAX_NAME_BYTES = 512;
const MAX_MAX_DELIVERIES = 1_000_000;

function checkKeyName(what: string, key: string): void {
  if (key.length === 0) throw invalid(`${what} must not be empty`);
  if (Buffer.byteLength(key) > MAX_NAME_BYTES) throw invalid(`${what} is longer than ${MAX_NAME_BYTES} bytes`);
  if (/[\s\p{Cc}]/u.test(key)) throw invalid(`${what} "${key}" contains whitespace or control characters; use a plain Redis key`);
}

function checkDuration(what: string, ms: number | undefined): void {
  if (ms !== undefined && (!Number.isFinite(ms) || ms < 0)) throw invalid(`${what} must be a positive duration`);
}

/** The hash tag that would put `name`'s keys in one slot, e.g. "{thumbnails}". */
function suggestedTag(name: string): string {
  return `{${hashTag(name) ?? name}}`;
}

function checkOneSlot(config: QueueConfig): void {
  const keys = keysOf(config);
  const slot = slotOf(keys.queue);
  const stray = allKeys(keys).find((k) => slotOf(k) !== slot);
  if (stray === undefined) return;
  const tag = suggestedTag(config.name);
  throw invalid(
    `keys of reliable queue "${config.name}" fall in different Redis Cluster hash slots ` +
      `("${config.name}" in ${slot}, "${stray}" in ${slotOf(stray)}); one command moves items between them, ` +
      `so they must share a hash tag: use ${tag} and ${tag}.processing`,
  );
}

/** Validates a spec and fills in defaults; throws INVALID_ARGUMENT with what to fix. */
export function validateQueueSpec(spec: QueueSpec, nowMs: number): QueueConfig {
  checkKeyName("queue name", spec.name);
  if (spec.name.startsWith("{switchyard}")) throw invalid(`queue name "${spec.name}" uses Switchyard's own hash tag`);
  const mode = spec.mode;
  if (mode !== "simple" && mode !== "reliable") throw invalid(`queue "${spec.name}": mode must be SIMPLE or RELIABLE`);
  checkDuration("min_idle", spec.minIdleMs);
  checkDuration("recovery_ttl", spec.recoveryTtlMs);
  if (mode === "simple") {
    const reliableOnly = (
      [
        ["processing_list", spec.processingList],
        ["recovery_set", spec.recoverySet],
        ["min_idle", spec.minIdleMs],
        ["recovery_ttl", spec.recoveryTtlMs],
        ["max_deliveries", spec.maxDeliveries],
        ["dead_letter_list", spec.deadLetterList],
      ] as const
    ).find(([, v]) => v);
    if (reliableOnly) {
      throw invalid(`queue "${spec.name}": ${reliableOnly[0]} applies to RELIABLE queues only; remove it or declare the queue RELIABLE`);
    }
    return {
      name: spec.name, mode, processingList: "", recoverySet: "", minIdleMs: 0, recoveryTtlMs: 0,
      maxDeliveries: 0, deadLetterList: "", createTimeMs: nowMs,
    };
  }
  const recoverySet = spec.recoverySet ?? "";
  const minIdleMs = spec.minIdleMs ?? 0;
  const recoveryTtlMs = spec.recoveryTtlMs ?? 0;
  if (recoverySet && minIdleMs <= 0) {
    throw invalid(`queue "${spec.name}": a recovery set needs min_idle, longer than the slowest job takes (e.g. 60s)`);
  }
  if (!recoverySet && minIdleMs > 0) throw invalid(`queue "${spec.name}": min_idle needs a recovery_set to record claims in`);
  if (!recoverySet && recoveryTtlMs > 0) throw invalid(`queue "${spec.name}": recovery_ttl needs a recovery_set`);
  if (recoveryTtlMs > 0 && recoveryTtlMs <= minIdleMs) {
    throw invalid(`queue "${spec.name}": recovery_ttl (${recoveryTtlMs} ms) must be longer than min_idle (${minIdleMs} ms)`);
  }
  const maxDeliveries = spec.maxDeliveries || DEFAULT_MAX_DELIVERIES;
  if (!Number.isInteger(maxDeliveries) || maxDeliveries < 1 || maxDeliveries > MAX_MAX_DELIVERIES) {
    throw invalid(`queue "${spec.name}": max_deliveries must be between 1 and ${MAX_MAX_DELIVERIES}`);
  }
  const config: QueueConfig = {
    name: spec.name,
    mode,
    processingList: spec.processingList || defaultProcessing(spec.name),
    recoverySet,
    minIdleMs,
    recoveryTtlMs,
    maxDeliveries,
    deadLetterList: spec.deadLetterList || defaultDeadLetter(spec.name),
    createTimeMs: nowMs,
  };
  checkKeyName("processing_list", config.processingList);
  checkKeyName("dead_letter_list", config.deadLetterList);
  if (recoverySet) checkKeyName("recovery_set", recoverySet);
  const keys = allKeys(keysOf(config));
  const twice = keys.find((k, i) => keys.indexOf(k) !== i);
  if (twice) throw invalid(`queue "${spec.name}": key "${twice}" is used for two purposes; give each list its own name`);
  checkOneSlot(config);
  return config;
}

/** The Redis keys of a declared queue. */
export function keysOf(config: QueueConfig): QueueKeys {
  return queueKeys(config.name, config.processingList || config.name, config.deadLetterList || config.name, config.recoverySet);
}

/** True when two declarations ask for the same thing (create times aside). */
export function sameDeclaration(a: QueueConfig, b: QueueConfig): boolean {
  return JSON.stringify({ ...a, createTimeMs: 0 }) === JSON.stringify({ ...b, createTimeMs: 0 });
}
