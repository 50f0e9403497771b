/**
 * The audit log (SPEC S6, C11): one entry per mutating call, who, what, when
 * and the result. Entries live in one hash under their sequence number; one
 * sorted set by sequence pages them newest first, another by time lets
 * LogClean remove old ones (the job log's layout, without the per-job index).
 */
import { invalid } from "../errors.js";
import { CLEAN_BATCH, CLEAN_MAX_PER_RUN } from "../cron/job-log.js";
import { execAll, type RedisConnection } from "../redis/connection.js";
import type { SystemKeys } from "../redis/keys.js";

/** One audited call. */
export interface AuditEntry {
  id: string;
  timeMs: number;
  /** Token name, "CN=<common name>", or "anonymous". */
  actor: string;
  /** Full method name, e.g. "switchyard.v1.QueueService/CreateQueue". */
  method: string;
  /** Queue name or job id(s) the call acted on. */
  target: string;
  detail: string;
  /** gRPC status code of the result (0 = OK). */
  code: number;
  /** Status message when code is not 0. */
  message: string;
  peer: string;
  instanceId: string;
}

/** A page of entries, newest first. */
export interface AuditPage {
  logs: AuditEntry[];
  nextPageToken: string;
}


/** Reads and writes the audit log in Redis (keys in redis/keys.ts). */
export class AuditLogStore {
  constructor(
    private readonly redis: RedisConnection,
    private readonly keys: SystemKeys,
  ) {}

  /** Writes an entry; resolves to it with its id. */
  async append(entry: Omit<AuditEntry, "id">): Promise<AuditEntry> {
    const seq = await this.redis.client.incr(this.keys.auditSeq);
    const stored: AuditEntry = { id: String(seq), ...entry };
    await execAll(
      this.redis.client
        .multi()
        .hset(this.keys.audit, stored.id, JSON.stringify(stored))
        .zadd(this.keys.auditOrder, seq, stored.id)
        .zadd(this.keys.auditTime, stored.timeMs, stored.id),
    );
    return stored;
  }

  /** Entries newest first, `pageSize` (default 50, at most 1000) at a time. */
  async list(pageSize: number, pageToken: string): Promise<AuditPage> {
    const size = pageSize <= 0 ? 50 : Math.min(pageSize, 1000);
    const before = pageToken ? Buffer.from(pageToken, "base64url").toString() : "";
    if (pageToken && !/^\d+$/.test(before)) throw invalid("page_token is not one this server issued", "page_token");
    const ids = await this.redis.client.zrevrangebyscore(this.keys.auditOrder, before ? `(${before}` : "+inf", "-inf", "LIMIT", 0, size + 1);
    const page = ids.slice(0, size);
    const json = page.length ? await this.redis.client.hmget(this.keys.audit, ...page) : [];
    const logs = json.filter((j): j is string => j !== null).map((j) => JSON.parse(j) as AuditEntry);
    const next = ids.length > size ? Buffer.from(page[page.length - 1]).toString("base64url") : "";
    return { logs, nextPageToken: next };
  }

  /** Removes entries older than `cutoffMs`, `batch` at a time, at most `max`; returns how many. */
  async clean(cutoffMs: number, batch = CLEAN_BATCH, max = CLEAN_MAX_PER_RUN): Promise<number> {
    let removed = 0;
    while (removed < max) {
      const ids = await this.redis.client.zrangebyscore(this.keys.auditTime, "-inf", `(${cutoffMs}`, "LIMIT", 0, Math.min(batch, max - removed));
      if (ids.length === 0) break;
      // Count what this call removed: a concurrent clean may have taken some of these ids already.
      const [gone] = await execAll(
        this.redis.client.multi().zrem(this.keys.auditTime, ...ids).zrem(this.keys.auditOrder, ...ids).hdel(this.keys.audit, ...ids),
      );
      removed += Number(gone);
      if (ids.length < batch) break;
    }
    return removed;
  }
}
