/**
 * Queue declarations: what a caller may ask for (QueueSpec), how it is
 * validated, and what is stored (QueueConfig). Validation refuses, with a
 * message that says what to change, anything that would not work on Redis
 * Cluster too (SPEC Q2, Q5, Q7), and any key in Switchyard's own namespace (Q15).
 */
import { SwitchyardError, invalid } from "../errors.js";
import { defaultDeadLetter, defaultProcessing, hashTag, internalKey, queueKeys, allKeys, slotOf, type QueueKeys } from "../redis/keys.js";

/** How items leave a queue. */
export type QueueMode = "simple" | "reliable" | "stream";

/** A consumer group of a stream queue, and where it starts when created ("$", "0" or an entry id). */
export interface ConsumerGroupSpec {
  readonly name: string;
  readonly startId: string;
}

/** How a stream queue's history is trimmed on every append (approximately); 0: no limit. */
export interface StreamTrimPolicy {
  readonly maxLen: number;
  readonly maxAgeMs: number;
}

/** How long a retried or recovered item waits: see RetryPolicy in queue.proto. */
export interface RetryPolicy {
  readonly initialMs: number;
  readonly multiplier: number;
  readonly maxMs: number;
  readonly jitter: number;
}

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
  retryPolicy?: Partial<RetryPolicy>;
  idempotencyWindowMs?: number;
  publishTtlMs?: number;
  replyQueue?: string;
  /** Stream only. */
  groups?: { name: string; startId?: string }[];
  /** Stream only. */
  streamTrim?: Partial<StreamTrimPolicy>;
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
  /**
   * Given when the queue is declared anew and kept by every change after: a queue
   * deleted and declared again is another incarnation, whatever its settings, and
   * what was open on the old one ends (registry.ts, put()). "" in declarations
   * stored before it was kept, and in one not stored yet.
   */
  readonly incarnation: string;
  /** Reliable: the waits of retried and recovered items. */
  readonly retryPolicy: RetryPolicy;
  readonly idempotencyWindowMs: number;
  /** 0: pushes leave the key's expiry alone unless they give a ttl. */
  readonly publishTtlMs: number;
  /** "" : none. */
  readonly replyQueue: string;
  /** Deliveries stopped by PauseQueue. */
  readonly paused: boolean;
  /** Stream only: the consumer groups (empty for lists). */
  readonly groups: readonly ConsumerGroupSpec[];
  /** Stream only: the trimming policy (zeros: never trimmed). */
  readonly streamTrim: StreamTrimPolicy;
}

/** Deliveries after which a failing item is dead-lettered, unless the declaration says otherwise. */
export const DEFAULT_MAX_DELIVERIES = 25;
/** The retry policy of a declaration that names none (queue.proto's RetryPolicy). */
// Retry at once (the seed's retry moves the item back to the queue); a queue opts into backoff.
export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({ initialMs: 0, multiplier: 2, maxMs: 600_000, jitter: 0.2 });
/** How long a stream queue's entry may stay pending before it is reclaimed, unless the declaration says otherwise. */
export const DEFAULT_STREAM_MIN_IDLE_MS = 60_000;
/**
 * A stream queue's longest min_idle, 10 years: Redis keeps an entry's idle time as the time since
 * its last delivery, and an entry handed back is parked with XCLAIM … IDLE min_idle, which Redis
 * takes as "delivered min_idle ago" and refuses past 1970 (idle 0 instead): it would never come back.
 */
export const MAX_STREAM_MIN_IDLE_MS = 10 * 365 * 86_400_000;
/** A stream queue that declares no trimming. */
export const NO_TRIM: StreamTrimPolicy = Object.freeze({ maxLen: 0, maxAgeMs: 0 });
/** How long idempotency keys are remembered unless the declaration says otherwise. */
export const DEFAULT_IDEMPOTENCY_WINDOW_MS = 24 * 3600_000;
const MAX_NAME_BYTES = 512;
const MAX_MAX_DELIVERIES = 1_000_000;
const MAX_BACKOFF_MS = 7 * 24 * 3600_000;
const MAX_IDEMPOTENCY_WINDOW_MS = 30 * 24 * 3600_000;

/** A declaration's field as a request names it (CreateQueueRequest.queue, UpdateQueueRequest.queue). */
const field = (name: string) => `queue.${name}`;

function checkKeyName(what: string, key: string, name: string): void {
  if (key.length === 0) throw invalid(`${what} must not be empty`, field(name));
  if (Buffer.byteLength(key) > MAX_NAME_BYTES) throw invalid(`${what} is longer than ${MAX_NAME_BYTES} bytes`, field(name));
  if (/[\s\p{Cc}]/u.test(key)) throw invalid(`${what} "${key}" contains whitespace or control characters; use a plain Redis key`, field(name));
}

function checkDuration(what: string, ms: number | undefined, max = Number.MAX_SAFE_INTEGER): void {
  if (ms !== undefined && (!Number.isFinite(ms) || ms < 0)) throw invalid(`${what} must be a positive duration`, field(what));
  if (ms !== undefined && ms > max) throw invalid(`${what} must be at most ${max / 1000} s`, field(what));
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
  if (config.mode === "stream") {
    // The stream is the name itself; only the dead-letter list can be moved to its slot.
    throw new SwitchyardError(
      "invalid_argument",
      `dead_letter_list "${stray}" of stream queue "${config.name}" falls in another Redis Cluster hash slot (${slotOf(stray)}, the stream's is ${slot}); ` +
        `one script moves dead entries into it, so it must share the stream's slot: use "${streamDeadLetter(config.name)}"`,
      { reason: "SLOT_MISMATCH", metadata: { queue: config.name, key: stray, hashTag: tag } },
    );
  }
  // Name the corrected key of each list the caller named, so the advice can be taken as it is.
  const fixes = [`${tag}`, `${tag}.processing`];
  if (config.recoverySet) fixes.push(`${tag}.claims`);
  if (config.deadLetterList !== defaultDeadLetter(config.name)) fixes.push(`${tag}.dead`);
  throw new SwitchyardError(
    "invalid_argument",
    `keys of ${config.mode} queue "${config.name}" fall in different Redis Cluster hash slots ` +
      `("${config.name}" in ${slot}, "${stray}" in ${slotOf(stray)}); one command moves items between them, ` +
      `so they must share a hash tag: use ${fixes.slice(0, -1).join(", ")} and ${fixes[fixes.length - 1]}`,
    { reason: "SLOT_MISMATCH", metadata: { queue: config.name, key: stray, hashTag: tag } },
  );
}

/** Refuses keys in Switchyard's own hash slot namespace (`{<namespace>}`), whatever their place in the name. */
function checkOutsideNamespace(config: QueueConfig, namespace: string): void {
  const own = allKeys(keysOf(config)).find((k) => hashTag(k) === namespace);
  if (own === undefined) return;
  throw new SwitchyardError(
    "invalid_argument",
    `queue "${config.name}": key "${own}" has the hash tag {${namespace}}, which is Switchyard's own; ` +
      `choose names with another hash tag`,
    { reason: "KEY_NOT_ALLOWED", metadata: { queue: config.name, key: own } },
  );
}

function checkRetryPolicy(name: string, given: Partial<RetryPolicy> | undefined): RetryPolicy {
  const p = { ...DEFAULT_RETRY_POLICY, ...Object.fromEntries(Object.entries(given ?? {}).filter(([, v]) => v !== undefined)) };
  checkDuration("retry_policy.initial_backoff", p.initialMs, MAX_BACKOFF_MS);
  checkDuration("retry_policy.max_backoff", p.maxMs, MAX_BACKOFF_MS);
  if (!Number.isFinite(p.multiplier) || p.multiplier < 1 || p.multiplier > 100) {
    throw invalid(`queue "${name}": retry_policy.multiplier must be between 1 and 100`, field("retry_policy.multiplier"));
  }
  if (!Number.isFinite(p.jitter) || p.jitter < 0 || p.jitter > 1) throw invalid(`queue "${name}": retry_policy.jitter must be between 0 and 1`, field("retry_policy.jitter"));
  if (p.maxMs < p.initialMs) {
    throw invalid(`queue "${name}": retry_policy.max_backoff (${p.maxMs} ms) must be at least initial_backoff (${p.initialMs} ms)`, field("retry_policy.max_backoff"));
  }
  return Object.freeze(p);
}

/** Validates a spec and fills in defaults; throws INVALID_ARGUMENT with what to fix. */
export function validateQueueSpec(spec: QueueSpec, nowMs: number, namespace = "switchyard"): QueueConfig {
  checkKeyName("queue name", spec.name, "name");
  if (internalKey(spec.name, "fence") === undefined) {
    // Redis reads no hash tag in a name whose first "{" closes at once ("x{}{y}"), and hashes it whole.
    const tag = spec.name.replace(/[{}]/g, "") || "jobs";
    throw invalid(`queue name "${spec.name}" has a "}" but no hash tag; name it with a hash tag such as {${tag}}`, field("name"));
  }
  const mode = spec.mode;
  if (mode !== "simple" && mode !== "reliable" && mode !== "stream") throw invalid(`queue "${spec.name}": mode must be SIMPLE, RELIABLE or STREAM`, field("mode"));
  if (mode !== "stream") {
    const streamOnly = ([["groups", spec.groups?.length], ["stream_trim", spec.streamTrim]] as const).find(([, v]) => v);
    if (streamOnly) throw invalid(`queue "${spec.name}": ${streamOnly[0]} applies to STREAM queues only; remove it or declare the queue STREAM`, field(streamOnly[0]));
  }
  checkDuration("min_idle", spec.minIdleMs);
  checkDuration("recovery_ttl", spec.recoveryTtlMs);
  checkDuration("idempotency_window", spec.idempotencyWindowMs, MAX_IDEMPOTENCY_WINDOW_MS);
  checkDuration("publish_ttl", spec.publishTtlMs);
  if (spec.replyQueue) checkKeyName("reply_queue", spec.replyQueue, "reply_queue");
  const common = {
    name: spec.name,
    createTimeMs: nowMs,
    incarnation: "",
    idempotencyWindowMs: spec.idempotencyWindowMs || DEFAULT_IDEMPOTENCY_WINDOW_MS,
    publishTtlMs: spec.publishTtlMs ?? 0,
    replyQueue: spec.replyQueue ?? "",
    paused: false,
    groups: [] as readonly ConsumerGroupSpec[],
    streamTrim: NO_TRIM,
  };
  let config: QueueConfig;
  if (mode === "simple") {
    const reliableOnly = (
      [
        ["processing_list", spec.processingList],
        ["recovery_set", spec.recoverySet],
        ["min_idle", spec.minIdleMs],
        ["recovery_ttl", spec.recoveryTtlMs],
        ["max_deliveries", spec.maxDeliveries],
        ["dead_letter_list", spec.deadLetterList],
        ["retry_policy", spec.retryPolicy],
      ] as const
    ).find(([, v]) => v);
    if (reliableOnly) {
      throw invalid(`queue "${spec.name}": ${reliableOnly[0]} applies to RELIABLE queues only; remove it or declare the queue RELIABLE`, field(reliableOnly[0]));
    }
    config = {
      ...common, mode, processingList: "", recoverySet: "", minIdleMs: 0, recoveryTtlMs: 0,
      maxDeliveries: 0, deadLetterList: "", retryPolicy: DEFAULT_RETRY_POLICY,
    };
  } else if (mode === "stream") {
    config = streamConfig(spec, common);
  } else {
    const recoverySet = spec.recoverySet ?? "";
    const minIdleMs = spec.minIdleMs ?? 0;
    const recoveryTtlMs = spec.recoveryTtlMs ?? 0;
    if (recoverySet && minIdleMs <= 0) {
      throw invalid(`queue "${spec.name}": a recovery set needs min_idle, longer than the slowest job takes (e.g. 60s)`, field("min_idle"));
    }
    if (!recoverySet && minIdleMs > 0) throw invalid(`queue "${spec.name}": min_idle needs a recovery_set to record claims in`, field("recovery_set"));
    if (!recoverySet && recoveryTtlMs > 0) throw invalid(`queue "${spec.name}": recovery_ttl needs a recovery_set`, field("recovery_set"));
    if (recoveryTtlMs > 0 && recoveryTtlMs <= minIdleMs) {
      throw invalid(`queue "${spec.name}": recovery_ttl (${recoveryTtlMs} ms) must be longer than min_idle (${minIdleMs} ms)`, field("recovery_ttl"));
    }
    const maxDeliveries = checkMaxDeliveries(spec);
    config = {
      ...common,
      mode,
      processingList: spec.processingList || defaultProcessing(spec.name),
      recoverySet,
      minIdleMs,
      recoveryTtlMs,
      maxDeliveries,
      deadLetterList: spec.deadLetterList || defaultDeadLetter(spec.name),
      retryPolicy: checkRetryPolicy(spec.name, spec.retryPolicy),
    };
    checkKeyName("processing_list", config.processingList, "processing_list");
    checkKeyName("dead_letter_list", config.deadLetterList, "dead_letter_list");
    if (recoverySet) checkKeyName("recovery_set", recoverySet, "recovery_set");
  }
  const keys = allKeys(keysOf(config));
  const twice = keys.find((k, i) => keys.indexOf(k) !== i);
  if (twice) throw invalid(`queue "${spec.name}": key "${twice}" is used for two purposes; give each list its own name`);
  checkOutsideNamespace(config, namespace);
  if (config.mode !== "simple") checkOneSlot(config);
  return config;
}

function checkMaxDeliveries(spec: QueueSpec): number {
  const maxDeliveries = spec.maxDeliveries || DEFAULT_MAX_DELIVERIES;
  if (!Number.isInteger(maxDeliveries) || maxDeliveries < 1 || maxDeliveries > MAX_MAX_DELIVERIES) {
    throw invalid(`queue "${spec.name}": max_deliveries must be between 1 and ${MAX_MAX_DELIVERIES}`, field("max_deliveries"));
  }
  return maxDeliveries;
}

/** A stream queue's default dead-letter list: "<name>.dead" in the stream's slot ("{uploads}.dead" for "uploads"). */
function streamDeadLetter(name: string): string {
  return internalKey(name, "dead") ?? defaultDeadLetter(name);
}

/** A stream entry id as XGROUP takes it: "$", "0" or "<ms>-<seq>" (or "<ms>"), each part at most 2^64 - 1. */
const STREAM_ID = /^(\$|\d{1,20}(-\d{1,20})?)$/;
const MAX_ID_PART = 2n ** 64n - 1n;

/** Checks a consumer group's name and start id; `at` is the field that names it. */
export function checkGroup(queue: string, group: { name: string; startId?: string }, at: string): ConsumerGroupSpec {
  checkKeyName("consumer group name", group.name, `${at}.name`);
  const startId = group.startId || "$";
  if (!STREAM_ID.test(startId) || (startId !== "$" && startId.split("-").some((part) => BigInt(part) > MAX_ID_PART))) {
    throw invalid(`queue "${queue}": group "${group.name}" start_id "${startId}" is not "$", "0" or an entry id such as 1700000000000-0`, field(`${at}.start_id`));
  }
  return Object.freeze({ name: group.name, startId });
}

/** The declaration of a STREAM queue: its groups, trimming, reclaiming and dead letters. */
function streamConfig(spec: QueueSpec, common: Omit<QueueConfig, "mode" | "processingList" | "recoverySet" | "minIdleMs" | "recoveryTtlMs" | "maxDeliveries" | "deadLetterList" | "retryPolicy">): QueueConfig {
  const listOnly = ([["processing_list", spec.processingList], ["recovery_set", spec.recoverySet], ["recovery_ttl", spec.recoveryTtlMs]] as const).find(([, v]) => v);
  if (listOnly) {
    throw invalid(`queue "${spec.name}": ${listOnly[0]} applies to RELIABLE queues only; a STREAM queue keeps its pending entries in each group's pending list`, field(listOnly[0]));
  }
  const groups = (spec.groups ?? []).map((g, i) => checkGroup(spec.name, g, `groups[${i}]`));
  const twice = groups.find((g, i) => groups.findIndex((h) => h.name === g.name) !== i);
  if (twice) throw invalid(`queue "${spec.name}": group "${twice.name}" is named twice`, field("groups"));
  const trim = { maxLen: spec.streamTrim?.maxLen ?? 0, maxAgeMs: spec.streamTrim?.maxAgeMs ?? 0 };
  if (!Number.isSafeInteger(trim.maxLen) || trim.maxLen < 0) throw invalid(`queue "${spec.name}": stream_trim.max_len must be a whole number`, field("stream_trim.max_len"));
  checkDuration("stream_trim.max_age", trim.maxAgeMs);
  if (trim.maxLen > 0 && trim.maxAgeMs > 0) {
    throw invalid(`queue "${spec.name}": give stream_trim.max_len or stream_trim.max_age, not both (XADD trims by one of them)`, field("stream_trim"));
  }
  if ((spec.minIdleMs ?? 0) > MAX_STREAM_MIN_IDLE_MS) {
    throw invalid(
      `queue "${spec.name}": a stream queue's min_idle must be at most 10 years (${MAX_STREAM_MIN_IDLE_MS / 1000} s): ` +
        "Redis counts an entry's idle time from its last delivery and cannot park one longer ago than 1970",
      field("min_idle"),
    );
  }
  const config: QueueConfig = {
    ...common,
    mode: "stream",
    processingList: "",
    recoverySet: "",
    minIdleMs: spec.minIdleMs || DEFAULT_STREAM_MIN_IDLE_MS,
    recoveryTtlMs: 0,
    maxDeliveries: checkMaxDeliveries(spec),
    deadLetterList: spec.deadLetterList || streamDeadLetter(spec.name),
    retryPolicy: checkRetryPolicy(spec.name, spec.retryPolicy),
    groups,
    streamTrim: trim.maxLen || trim.maxAgeMs ? Object.freeze(trim) : NO_TRIM,
  };
  checkKeyName("dead_letter_list", config.deadLetterList, "dead_letter_list");
  return config;
}

/**
 * The keys a declaration names itself, beyond its name (processing, dead
 * letters, recovery): each must fall under the declaring caller's admin scope
 * unless it lies in the queue's own namespace, `<name>.…`.
 */
export function namedKeys(spec: Pick<QueueSpec, "name" | "processingList" | "deadLetterList" | "recoverySet">): string[] {
  return [spec.processingList, spec.deadLetterList, spec.recoverySet].filter(
    (k): k is string => !!k && !k.startsWith(`${spec.name}.`),
  );
}

/** A stored declaration as the spec that declares it again. */
export function specOf(config: QueueConfig): QueueSpec {
  const reliable = config.mode !== "simple";
  const stream = config.mode === "stream";
  return {
    name: config.name,
    mode: config.mode,
    processingList: config.mode === "reliable" ? config.processingList : undefined,
    recoverySet: config.recoverySet || undefined,
    minIdleMs: config.minIdleMs || undefined,
    recoveryTtlMs: config.recoveryTtlMs || undefined,
    maxDeliveries: reliable ? config.maxDeliveries : undefined,
    deadLetterList: reliable ? config.deadLetterList : undefined,
    retryPolicy: reliable ? config.retryPolicy : undefined,
    idempotencyWindowMs: config.idempotencyWindowMs,
    publishTtlMs: config.publishTtlMs || undefined,
    replyQueue: config.replyQueue || undefined,
    groups: stream ? [...config.groups] : undefined,
    streamTrim: stream && (config.streamTrim.maxLen || config.streamTrim.maxAgeMs) ? config.streamTrim : undefined,
  };
}

/** The fields UpdateQueue may change (queue.proto), as update_mask paths → the spec fields they set. */
const UPDATABLE: Readonly<Record<string, readonly (keyof QueueSpec)[]>> = {
  max_deliveries: ["maxDeliveries"],
  min_idle: ["minIdleMs"],
  recovery_ttl: ["recoveryTtlMs"],
  retry_policy: ["retryPolicy"],
  idempotency_window: ["idempotencyWindowMs"],
  publish_ttl: ["publishTtlMs"],
  reply_queue: ["replyQueue"],
  stream_trim: ["streamTrim"],
};
/** retry_policy's sub-paths → the domain policy's fields. */
const POLICY_FIELDS: Readonly<Record<string, keyof RetryPolicy>> = {
  initial_backoff: "initialMs", multiplier: "multiplier", max_backoff: "maxMs", jitter: "jitter",
};
/** Fields that name the queue's keys or mode: they cannot change while it is declared. */
const IMMUTABLE = ["name", "mode", "processing_list", "recovery_set", "dead_letter_list"];
/** Fields UpdateQueue leaves to others: what to use instead. */
const ELSEWHERE: Readonly<Record<string, string>> = {
  paused: "pause and resume the queue with PauseQueue and ResumeQueue",
  create_time: "it is set by the server when the queue is first declared",
};

/**
 * `stored` with the fields of `given` named by `paths` (UpdateQueue's update
 * mask), validated as a new declaration would be. INVALID_ARGUMENT for an
 * unknown path; IMMUTABLE_FIELD (FAILED_PRECONDITION) for a key name or the mode.
 */
export function applyUpdate(stored: QueueConfig, given: QueueSpec, paths: readonly string[], namespace?: string): QueueConfig {
  if (paths.length === 0) throw invalid(`update_mask is required: name the fields to change (${Object.keys(UPDATABLE).join(", ")})`, "update_mask");
  const spec = specOf(stored);
  for (const path of paths) {
    const top = path.split(".")[0];
    if (ELSEWHERE[top]) throw invalid(`update_mask path "${path}" is not a field UpdateQueue changes: ${ELSEWHERE[top]}`, "update_mask");
    if (IMMUTABLE.includes(top)) {
      throw new SwitchyardError(
        "failed_precondition",
        `queue "${stored.name}": ${path} cannot change while the queue is declared (items in flight sit under its keys); ` +
          `DeleteQueue and declare it again to change it`,
        { reason: "IMMUTABLE_FIELD", metadata: { queue: stored.name, field: path } },
      );
    }
    const fields = UPDATABLE[top];
    if (!fields) throw invalid(`update_mask path "${path}" is not a field UpdateQueue changes; use ${Object.keys(UPDATABLE).join(", ")}`, "update_mask");
    const sub = POLICY_FIELDS[path.slice(top.length + 1)];
    if (top === "retry_policy" && path !== top) {
      if (!sub) throw invalid(`update_mask path "${path}": retry_policy has initial_backoff, multiplier, max_backoff and jitter`, "update_mask");
      // A masked jitter is the value sent, 0 included (unmasked, proto3's 0 means unset: the default).
      const value = given.retryPolicy?.[sub] ?? (sub === "jitter" ? 0 : undefined);
      spec.retryPolicy = { ...spec.retryPolicy, [sub]: value };
      continue;
    }
    for (const f of fields) (spec as unknown as Record<string, unknown>)[f] = given[f];
  }
  // Groups change through their own calls (CreateConsumerGroup, DeleteConsumerGroup), never here.
  return { ...validateQueueSpec(spec, stored.createTimeMs, namespace), incarnation: stored.incarnation, paused: stored.paused, groups: stored.groups };
}

/** A stored declaration as read back, with the defaults of fields added since it was stored. */
export function normalizeConfig(stored: Partial<QueueConfig> & Pick<QueueConfig, "name" | "mode">): QueueConfig {
  return {
    processingList: "", recoverySet: "", minIdleMs: 0, recoveryTtlMs: 0, maxDeliveries: 0, deadLetterList: "", createTimeMs: 0, incarnation: "",
    retryPolicy: DEFAULT_RETRY_POLICY, idempotencyWindowMs: DEFAULT_IDEMPOTENCY_WINDOW_MS, publishTtlMs: 0, replyQueue: "", paused: false,
    groups: [], streamTrim: NO_TRIM,
    ...stored,
  };
}

/** keysOf's answers by declaration: every lease, settle and push asks, and building them costs a dozen slot hashes. */
const keysByConfig = new WeakMap<QueueConfig, QueueKeys>();

/** The Redis keys of a declared queue. */
export function keysOf(config: QueueConfig): QueueKeys {
  const known = keysByConfig.get(config);
  // The names they derive from cannot change while the queue exists; compared anyway, as they are cheap to.
  if (
    known && known.queue === config.name && known.processing === config.processingList &&
    known.deadLetter === config.deadLetterList && known.recovery === config.recoverySet
  ) return known;
  const keys = queueKeys(config.name, config.processingList, config.deadLetterList, config.recoverySet);
  keysByConfig.set(config, keys);
  return keys;
}

/** The declaration's key names and mode: what cannot change while the queue exists. */
export function shapeOf(config: QueueConfig): string {
  return JSON.stringify([config.mode, config.processingList, config.deadLetterList, config.recoverySet]);
}

/** JSON of `value` with every object's keys in order, so equal values read alike whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1))) : v,
  );
}

/** True when two declarations ask for the same thing (create times, incarnations and pause aside). */
export function sameDeclaration(a: QueueConfig, b: QueueConfig): boolean {
  const asked = (c: QueueConfig) => canonical({ ...c, createTimeMs: 0, incarnation: "", paused: false });
  return asked(a) === asked(b);
}
