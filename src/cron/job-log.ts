/**
 * The job log (SPEC C10, C11): one entry per run and per tick that did not
 * run. Entries live in one hash; a per-job sorted set by sequence number pages
 * them newest first, and a sorted set by time lets LogClean remove old ones.
 */
import { invalid } from "../errors.js";
import { execAll, type RedisConnection } from "../redis/connection.js";
import type { SystemKeys } from "../redis/keys.js";

export type RunStatus = "succeeded" | "failed" | "skipped";
export type RunTrigger = "schedule" | "run_once" | "catch_up";

/** One log entry. */
export interface JobLogEntry {
  id: string;
  jobId: string;
  status: RunStatus;
  message: string;
  error: string;
  durationMs: number;
  trigger: RunTrigger;
  instanceId: string;
  /** 0 for RunOnce. */
  tickTimeMs: number;
  startTimeMs: number;
  /** The execution lock's fencing number, 0 without a lock. */
  fence: number;
}

/** A page of entries, newest first. */
export interface JobLogPage {
  logs: JobLogEntry[];
  nextPageToken: string;
}

/** LogClean's batch size and per-run cap per kind of log (seed 001 §6). */
export const CLEAN_BATCH = 5000;
export const CLEAN_MAX_PER_RUN = 200_000;

export class JobLogStore {
  constructor(
    private readonly redis: RedisConnection,
    private readonly keys: SystemKeys,
  ) {}

  /** A new entry id for job `jobId` (reserve it before the run starts, e.g. for RunOnce). */
  async newId(jobId: string): Promise<string> {
    return `${jobId}-${await this.redis.client.incr(this.keys.logSeq)}`;
  }

  /** Writes an entry; rejects when any of its writes failed. */
  async append(entry: JobLogEntry): Promise<void> {
    const seq = Number(entry.id.slice(entry.id.lastIndexOf("-") + 1));
    await execAll(
      this.redis.client
        .multi()
        .hset(this.keys.logs, entry.id, JSON.stringify(entry))
        .zadd(this.keys.logTime, entry.startTimeMs, entry.id)
        .zadd(this.keys.jobLogs(entry.jobId), seq, entry.id),
    );
  }

  /** The newest entry of each of these jobs (none for a job without entries). */
  async latest(jobIds: readonly string[]): Promise<Map<string, JobLogEntry>> {
    const found = new Map<string, JobLogEntry>();
    if (jobIds.length === 0) return found;
    const pipeline = this.redis.client.pipeline();
    for (const id of jobIds) pipeline.zrevrange(this.keys.jobLogs(id), 0, 0);
    const newest = (await pipeline.exec()) ?? [];
    const ids = newest.map(([err, ids]) => {
      if (err) throw err;
      return (ids as string[])[0];
    });
    const present = ids.filter((id): id is string => id !== undefined);
    if (present.length === 0) return found;
    const json = await this.redis.client.hmget(this.keys.logs, ...present);
    for (const j of json) {
      if (j === null) continue;
      const entry = JSON.parse(j) as JobLogEntry;
      found.set(entry.jobId, entry);
    }
    return found;
  }

  /** A job's entries, newest first. */
  async list(jobId: string, pageSize: number, pageToken: string): Promise<JobLogPage> {
    const size = pageSize <= 0 ? 50 : Math.min(pageSize, 1000);
    const before = pageToken ? Buffer.from(pageToken, "base64url").toString() : "+inf";
    if (before !== "+inf" && !/^\d+$/.test(before)) throw invalid("page_token is not one this server issued", "page_token");
    const ids = await this.redis.client.zrevrangebyscore(
      this.keys.jobLogs(jobId), before === "+inf" ? "+inf" : `(${before}`, "-inf", "LIMIT", 0, size + 1,
    );
    const page = ids.slice(0, size);
    const json = page.length ? await this.redis.client.hmget(this.keys.logs, ...page) : [];
    const logs = json.filter((j): j is string => j !== null).map((j) => JSON.parse(j) as JobLogEntry);
    const last = page[page.length - 1];
    const next = ids.length > size ? Buffer.from(last.slice(last.lastIndexOf("-") + 1)).toString("base64url") : "";
    return { logs, nextPageToken: next };
  }

  /**
   * Removes entries older than `cutoffMs`, `batch` at a time, at most `max` in
   * all; returns how many it removed.
   */
  async clean(cutoffMs: number, batch = CLEAN_BATCH, max = CLEAN_MAX_PER_RUN): Promise<number> {
    let removed = 0;
    while (removed < max) {
      const ids = await this.redis.client.zrangebyscore(this.keys.logTime, "-inf", `(${cutoffMs}`, "LIMIT", 0, Math.min(batch, max - removed));
      if (ids.length === 0) break;
      const byJob = new Map<string, string[]>();
      for (const id of ids) {
        const jobId = id.slice(0, id.lastIndexOf("-"));
        const same = byJob.get(jobId);
        if (same) same.push(id);
        else byJob.set(jobId, [id]);
      }
      const tx = this.redis.client.multi().zrem(this.keys.logTime, ...ids).hdel(this.keys.logs, ...ids);
      for (const [jobId, jobIds] of byJob) tx.zrem(this.keys.jobLogs(jobId), ...jobIds);
      // Count what this call removed: a concurrent clean may have taken some of these ids already.
      const [gone] = await execAll(tx);
      removed += Number(gone);
      if (ids.length < batch) break;
    }
    return removed;
  }
}
