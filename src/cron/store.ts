/**
 * Jobs in Redis: one hash of JSON records, ids from a counter, and a pub/sub
 * channel on which every change is announced so each instance's scheduler
 * remounts within a second (SPEC C13).
 */
import { SwitchyardError, invalid } from "../errors.js";
import type { Clock } from "../clock.js";
import type { RedisConnection } from "../redis/connection.js";
import type { SystemKeys } from "../redis/keys.js";
import { replaceJob } from "../redis/scripts.js";
import { RUNNING, UNPUBLISHED, validateJobFields, versionOf, type JobFields, type JobRecord, type JobStatusCode } from "./job.js";

/** A page of jobs. */
export interface JobPage {
  jobs: JobRecord[];
  nextPageToken: string;
}

/** Filters for {@link JobStore.list}. */
export interface JobFilter {
  status?: JobStatusCode;
  name?: string;
  pageSize?: number;
  pageToken?: string;
}

/** NOT_FOUND (JOB_NOT_FOUND) for a job that does not exist; INVALID_ARGUMENT when no id was given. */
function jobNotFound(id: string): SwitchyardError {
  if (!id) return invalid("id is required", "id");
  return new SwitchyardError("not_found", `job ${id} does not exist`, { reason: "JOB_NOT_FOUND", metadata: { job: id } });
}

export class JobStore {
  constructor(
    private readonly redis: RedisConnection,
    readonly keys: SystemKeys,
    private readonly clock: Clock,
    /** Jobs that may exist (not deleted) at once; CreateJob beyond it is RESOURCE_EXHAUSTED. */
    private readonly maxJobs = Number.POSITIVE_INFINITY,
  ) {}

  private async put(job: JobRecord): Promise<void> {
    await this.redis.client.hset(this.keys.jobs, job.id, JSON.stringify(job));
    await this.redis.client.publish(this.keys.cronEvents, job.id);
  }

  /** Creates a job; it is always stored UNPUBLISHED. */
  async create(fields: JobFields, actor: string): Promise<JobRecord> {
    const valid = validateJobFields(fields).fields;
    // Checked before the write, so racing creates may pass the limit by a few: it guards size, not an exact count.
    // HLEN counts soft-deleted records too, so only near the limit is the exact count worth its cost.
    const stored = await this.redis.client.hlen(this.keys.jobs);
    const existing = stored < this.maxJobs ? stored : (await this.all()).length;
    if (existing >= this.maxJobs) {
      throw new SwitchyardError(
        "resource_exhausted",
        `${existing} jobs exist, the limit (SWITCHYARD_MAX_CRON_JOBS=${this.maxJobs}); delete jobs you no longer need, or raise the limit`,
        { reason: "LIMIT_EXCEEDED" },
      );
    }
    const id = String(await this.redis.client.incr(this.keys.jobSeq));
    const now = this.clock.now();
    const job: JobRecord = {
      ...valid,
      id,
      status: UNPUBLISHED,
      createTimeMs: now,
      updateTimeMs: now,
      createActor: actor,
      updateActor: actor,
      activeSinceMs: 0,
      deleted: false,
      version: 1,
    };
    await this.put(job);
    return job;
  }

  /** The job, including soft-deleted ones when `withDeleted`. */
  async find(id: string, withDeleted = false): Promise<JobRecord | undefined> {
    const json = await this.redis.client.hget(this.keys.jobs, id);
    if (json === null) return undefined;
    const job = JSON.parse(json) as JobRecord;
    return job.deleted && !withDeleted ? undefined : job;
  }

  /** The job, or NOT_FOUND. */
  async get(id: string): Promise<JobRecord> {
    const job = id ? await this.find(id) : undefined;
    if (!job) throw jobNotFound(id);
    return job;
  }

  /** Every job that is not deleted (or every job, with `withDeleted`), by id. */
  async all(withDeleted = false): Promise<JobRecord[]> {
    const all = await this.redis.client.hvals(this.keys.jobs);
    return all
      .map((json) => JSON.parse(json) as JobRecord)
      .filter((j) => withDeleted || !j.deleted)
      .sort((a, b) => Number(a.id) - Number(b.id));
  }

  /** Jobs by id, filtered and a page at a time. */
  async list(filter: JobFilter): Promise<JobPage> {
    const size = !filter.pageSize || filter.pageSize <= 0 ? 100 : Math.min(filter.pageSize, 1000);
    const after = filter.pageToken ? Number(Buffer.from(filter.pageToken, "base64url").toString()) : 0;
    if (!Number.isInteger(after) || after < 0) throw invalid("page_token is not one this server issued", "page_token");
    const needle = filter.name?.toLowerCase() ?? "";
    const matching = (await this.all()).filter(
      (j) => Number(j.id) > after && (filter.status === undefined || j.status === filter.status) && j.name.toLowerCase().includes(needle),
    );
    const jobs = matching.slice(0, size);
    const more = matching.length > size;
    return { jobs, nextPageToken: more ? Buffer.from(jobs[jobs.length - 1].id).toString("base64url") : "" };
  }

  /**
   * Applies `change` to the current record and stores the result, unless the
   * record changed meanwhile: then it re-reads and applies `change` again.
   */
  private async mutate(id: string, change: (job: JobRecord) => JobRecord | undefined): Promise<JobRecord> {
    for (let attempt = 0; attempt < 10; attempt++) {
      const read = id ? await this.redis.client.hget(this.keys.jobs, id) : null;
      const job = read === null ? undefined : (JSON.parse(read) as JobRecord);
      if (!job || job.deleted) throw jobNotFound(id);
      const changed = change(job);
      if (!changed) return job;
      const next = { ...changed, version: versionOf(job) + 1 };
      if (await replaceJob(this.redis.client, this.keys.jobs, this.keys.cronEvents, id, read!, JSON.stringify(next))) return next;
    }
    throw new SwitchyardError("unavailable", `job ${id} is changing too often to update; retry`, { reason: "CONTENDED", metadata: { job: id } });
  }

  /**
   * Replaces the given fields; nothing is saved when the result is invalid, or
   * when `allowed` throws for it (the caller may not own a job like that).
   */
  async update(id: string, patch: Partial<JobFields>, actor: string, allowed?: (job: JobFields) => void): Promise<JobRecord> {
    return this.mutate(id, (job) => {
      const merged = validateJobFields({ ...job, ...patch }).fields;
      allowed?.(merged);
      const now = this.clock.now();
      // A new schedule owes nothing for the old one's past ticks: count misfires from now on.
      const rescheduled = merged.schedule !== job.schedule || merged.timeZone !== job.timeZone;
      return {
        ...job,
        ...merged,
        updateTimeMs: now,
        updateActor: actor,
        activeSinceMs: rescheduled && job.status === RUNNING ? now : job.activeSinceMs,
      };
    });
  }

  /**
   * Sets a job's status, from any status (SPEC C2); the one it has already is a
   * no-op. Nothing is saved when `allowed` throws for a job about to run (the
   * caller may not make it fire at its target).
   */
  async setStatus(id: string, status: JobStatusCode, actor: string, allowed?: (job: JobFields) => void): Promise<JobRecord> {
    return this.mutate(id, (job) => {
      if (job.status === status) return undefined;
      if (status === RUNNING) allowed?.(job);
      const now = this.clock.now();
      return { ...job, status, updateTimeMs: now, updateActor: actor, activeSinceMs: status === RUNNING ? now : job.activeSinceMs };
    });
  }

  /** Soft-deletes a job (NOT_FOUND if it does not exist or is already deleted). */
  async delete(id: string, actor: string): Promise<void> {
    await this.mutate(id, (job) => ({ ...job, deleted: true, updateTimeMs: this.clock.now(), updateActor: actor }));
  }
}
