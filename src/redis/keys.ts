/**
 * Every Redis key Switchyard uses is built here. A queue's own keys all derive
 * from its name, so a hash tag in the name keeps them in one cluster slot.
 */
import calculateSlot from "cluster-key-slot";

/** Keys Switchyard keeps for itself, all under one hash tag so they share a slot. */
export interface SystemKeys {
  /** Hash: queue name → declaration (JSON). */
  readonly queues: string;
  /** Pub/sub channel announcing declaration changes. */
  readonly events: string;
  /** Hash: job id → job (JSON). */
  readonly jobs: string;
  /** Counter: the last job id issued. */
  readonly jobSeq: string;
  /** Hash: job id → the last tick claimed (ms): each tick runs once across instances. */
  readonly ticks: string;
  /** Pub/sub channel announcing job changes. */
  readonly cronEvents: string;
  /** Hash: instance id → scheduler status (JSON). */
  readonly instances: string;
  /** Counter: the last job log sequence number. */
  readonly logSeq: string;
  /** Hash: log id → job log entry (JSON). */
  readonly logs: string;
  /** Sorted set: log id by time (ms), for cleaning by age. */
  readonly logTime: string;
  /** Set once the built-in jobs have been created. */
  readonly seeded: string;
  /** Counter: the last audit log sequence number. */
  readonly auditSeq: string;
  /** Hash: audit entry id → entry (JSON). */
  readonly audit: string;
  /** Sorted set: audit entry ids by sequence number, for paging newest first. */
  readonly auditOrder: string;
  /** Sorted set: audit entry ids by time (ms), for cleaning by age. */
  readonly auditTime: string;
  /** String: the execution lock of job `id` ("owner:fence:expires"). */
  jobLock(id: string): string;
  /** Counter: the last fencing number of job `id`'s lock. */
  jobFence(id: string): string;
  /** Sorted set: job `id`'s log ids by sequence number. */
  jobLogs(id: string): string;
}

/** Switchyard's own keys under namespace `ns`, e.g. `{switchyard}:queues`. */
export function systemKeys(ns: string): SystemKeys {
  const tag = `{${ns}}`;
  return {
    queues: `${tag}:queues`,
    events: `${tag}:events`,
    jobs: `${tag}:jobs`,
    jobSeq: `${tag}:job:seq`,
    ticks: `${tag}:cron:ticks`,
    cronEvents: `${tag}:cron:events`,
    instances: `${tag}:cron:instances`,
    logSeq: `${tag}:joblog:seq`,
    logs: `${tag}:joblog`,
    logTime: `${tag}:joblogs:time`,
    seeded: `${tag}:cron:seeded`,
    auditSeq: `${tag}:audit:seq`,
    audit: `${tag}:audit`,
    auditOrder: `${tag}:audit:order`,
    auditTime: `${tag}:audit:time`,
    jobLock: (id) => `${tag}:job:lock:${id}`,
    jobFence: (id) => `${tag}:job:fence:${id}`,
    jobLogs: (id) => `${tag}:joblogs:${id}`,
  };
}

/** The Redis keys of one reliable or simple queue. */
export interface QueueKeys {
  readonly queue: string;
  readonly processing: string;
  readonly deadLetter: string;
  /** The recovery zset, or "" when the queue has none. */
  readonly recovery: string;
  /** Hash: item sha1 → "fence:value" of its live delivery. */
  readonly leases: string;
  /**
   * Hash: item sha1 → deliveries so far; "dead:<sha1>" → a dead letter's
   * deliveries when it was dead-lettered; "completed" → items acked or dropped.
   */
  readonly deliveries: string;
  /** Counter: the last fence number issued. */
  readonly fence: string;
}

/** Default processing list name for queue `name` (the seed's `<key>.processing`). */
export const defaultProcessing = (name: string) => `${name}.processing`;
/** Default dead-letter list name for queue `name`. */
export const defaultDeadLetter = (name: string) => `${name}.dead`;

/** The keys of a queue with the given names. */
export function queueKeys(name: string, processing: string, deadLetter: string, recovery: string): QueueKeys {
  return {
    queue: name,
    processing,
    deadLetter,
    recovery,
    leases: `${name}.leases`,
    deliveries: `${name}.deliveries`,
    fence: `${name}.fence`,
  };
}

/** Every key of a queue that Redis holds, in a stable order. */
export function allKeys(keys: QueueKeys): string[] {
  return [keys.queue, keys.processing, keys.deadLetter, keys.recovery, keys.leases, keys.deliveries, keys.fence]
    .filter((k) => k !== "");
}

/** The cluster hash slot of `key` (honours `{hash tags}`). */
export function slotOf(key: string): number {
  return calculateSlot(key);
}

/** The hash tag of `key` as Redis Cluster reads it, or undefined when it has none. */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf("{");
  if (open < 0) return undefined;
  const close = key.indexOf("}", open + 1);
  if (close <= open + 1) return undefined;
  return key.slice(open + 1, close);
}
