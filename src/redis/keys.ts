/**
 * Every Redis key Switchyard uses is built here. A queue's own keys all derive
 * from its name, so a hash tag in the name keeps them in one cluster slot.
 */
/** Keys Switchyard keeps for itself, all under one hash tag so they share a slot. */
export interface SystemKeys {
  /** Hash: queue name → declaration (JSON). */
  readonly queues: string;
  /** Hash: Redis key → the declared queue that owns it (no two queues share a key). */
  readonly queueKeys: string;
  /** Pub/sub channel announcing declaration changes. */
  readonly events: string;
  /** Counter: the version of the last declaration change, in its event, so an instance can tell a late event from news. */
  readonly queuesVersion: string;
  /** Pub/sub channel: lease tokens of simple deliveries settled through an instance whose streams do not hold them. */
  readonly released: string;
  /** Sorted set: the same tokens by time (ms), kept a while for an instance that was not listening when one was announced. */
  readonly recentlyReleased: string;
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
  /** Sorted set: queue-serving instance id → its last heartbeat (ms); a dead one's deliveries are returned. */
  readonly alive: string;
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
  /** String: held by the one instance returning the deliveries of dead instance `id`. */
  reaping(id: string): string;
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
    queueKeys: `${tag}:queue-keys`,
    events: `${tag}:events`,
    queuesVersion: `${tag}:queues:version`,
    released: `${tag}:released`,
    recentlyReleased: `${tag}:released:recent`,
    jobs: `${tag}:jobs`,
    jobSeq: `${tag}:job:seq`,
    ticks: `${tag}:cron:ticks`,
    cronEvents: `${tag}:cron:events`,
    instances: `${tag}:cron:instances`,
    alive: `${tag}:instances:alive`,
    reaping: (id) => `${tag}:instances:reaping:${id}`,
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

/** The Redis keys of one queue. */
export interface QueueKeys {
  readonly queue: string;
  /** Reliable only ("" for a simple queue). */
  readonly processing: string;
  /** Reliable only ("" for a simple queue). */
  readonly deadLetter: string;
  /** The recovery zset, or "" when the queue has none. */
  readonly recovery: string;
  /** Hash: one record per live delivery, and counts (see scripts/lib.lua). Reliable only. */
  readonly leases: string;
  /** Counter: the last fence number issued. */
  readonly fence: string;
  /** Sorted set: items waiting for their time (delay, not_before, retry backoff), scored by when they are due. */
  readonly delayed: string;
  /** Sorted set: fences of deliveries returned or recovered, scored by when (telling superseded tokens apart). */
  readonly returned: string;
  /** Hash: idempotency key → the id of the first item enqueued with it. */
  readonly idempotency: string;
  /** Sorted set: idempotency keys scored by when they were first used, for expiring them. */
  readonly idempotencyTime: string;
}

/** Default processing list name for queue `name` (the seed's `<key>.processing`). */
export const defaultProcessing = (name: string) => `${name}.processing`;
/** Default dead-letter list name for queue `name`. */
export const defaultDeadLetter = (name: string) => `${name}.dead`;

/**
 * A key of Switchyard's own for queue `name`, in the queue's hash slot:
 * `<name>.<suffix>`, or `{<name>}.<suffix>` when the name has no hash tag of its
 * own (so the key's tag is the whole name). Undefined for the rare name neither
 * form keeps in its slot (one with a "}" and no hash tag).
 */
export function internalKey(name: string, suffix: string): string | undefined {
  const slot = slotOf(name);
  for (const key of [`${name}.${suffix}`, `{${name}}.${suffix}`]) if (slotOf(key) === slot) return key;
  return undefined;
}

/** The keys of a queue with the given names (processing and dead-letter "" for a simple queue). */
export function queueKeys(name: string, processing: string, deadLetter: string, recovery: string): QueueKeys {
  const own = (suffix: string) => internalKey(name, suffix) ?? `${name}.${suffix}`;
  return {
    queue: name,
    processing,
    deadLetter,
    recovery,
    leases: own("leases"),
    fence: own("fence"),
    delayed: own("delayed"),
    returned: own("returned"),
    idempotency: own("idempotency"),
    idempotencyTime: own("idempotency-time"),
  };
}

/** Every key of a queue that Redis may hold, in a stable order (the fence counter last). */
export function allKeys(keys: QueueKeys): string[] {
  return [
    keys.queue, keys.processing, keys.deadLetter, keys.recovery, keys.leases, keys.delayed, keys.returned,
    keys.idempotency, keys.idempotencyTime, keys.fence,
  ].filter((k) => k !== "");
}

/**
 * The cluster hash slot of `key`, as Redis computes it (keyHashSlot): the
 * CRC16 of its hash tag, or of the whole key when it has none, mod 16384. A
 * key whose first "{" is closed at once ("x{}{y}") has no hash tag: Redis
 * hashes it whole, where cluster-key-slot 1.1.2 goes on to hash "{y".
 */
export function slotOf(key: string): number {
  return crc16(Buffer.from(hashTag(key) ?? key)) & 0x3fff;
}

/** CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Redis Cluster hashes keys with. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The hash tag of `key` as Redis Cluster reads it, or undefined when it has none. */
export function hashTag(key: string): string | undefined {
  const open = key.indexOf("{");
  if (open < 0) return undefined;
  const close = key.indexOf("}", open + 1);
  if (close <= open + 1) return undefined;
  return key.slice(open + 1, close);
}
