/** Conversions between CronService messages and the cron domain. */
import { create } from "@bufbuild/protobuf";
import { SwitchyardError, invalid } from "../errors.js";
import {
  ExecutePolicy,
  type Job,
  JobLogSchema,
  type JobLog,
  JobRunStatus,
  JobSchema,
  JobStatus,
  JobTrigger,
  MisfirePolicy,
} from "../gen/switchyard/v1/cron_pb.js";
import { PAUSED, RUNNING, UNPUBLISHED, UPDATABLE, type JobFields, type JobRecord, type JobStatusCode } from "../cron/job.js";
import type { JobLogEntry } from "../cron/job-log.js";
import { nextFires, parseSchedule } from "../cron/schedule.js";
import { durationMs, msDuration, msTimestamp } from "./convert.js";

const toCode: Partial<Record<JobStatus, JobStatusCode>> = {
  [JobStatus.UNPUBLISHED]: UNPUBLISHED,
  [JobStatus.RUNNING]: RUNNING,
  [JobStatus.PAUSED]: PAUSED,
};
const fromCode: Record<JobStatusCode, JobStatus> = {
  [UNPUBLISHED]: JobStatus.UNPUBLISHED,
  [RUNNING]: JobStatus.RUNNING,
  [PAUSED]: JobStatus.PAUSED,
};

/** The seed's status number for a JobStatus; INVALID_ARGUMENT for UNSPECIFIED. */
export function statusCode(status: JobStatus): JobStatusCode {
  const code = toCode[status];
  if (code === undefined) throw invalid("status must be UNPUBLISHED, RUNNING or PAUSED", "status");
  return code;
}

/** The fields of a Job message, with unset enums taking their defaults. */
export function jobFields(job: Job | undefined): JobFields {
  if (!job) throw invalid("job is required", "job");
  const policy = job.executePolicy === ExecutePolicy.UNSPECIFIED ? 2 : job.executePolicy;
  if (policy < 1 || policy > 3) throw invalid("execute_policy must be CONCURRENT, SINGLETON or ABANDON", "job.execute_policy");
  if (job.misfirePolicy < 0 || job.misfirePolicy > 2) throw invalid("misfire_policy must be SKIP or RUN_ONCE", "job.misfire_policy");
  return {
    name: job.name,
    group: job.group,
    target: job.target,
    params: job.params,
    schedule: job.schedule,
    timeZone: job.timeZone,
    executePolicy: policy as 1 | 2 | 3,
    sync: job.sync,
    remark: job.remark,
    misfirePolicy: job.misfirePolicy === MisfirePolicy.RUN_ONCE ? "run_once" : "skip",
    catchUpWindowMs: durationMs("catch_up_window", job.catchUpWindow) ?? 0,
  };
}

/** The fields an UpdateJob changes: those named in the mask, or every populated one when it is empty. */
export function jobPatch(job: Job | undefined, paths: string[]): Partial<JobFields> {
  const fields = jobFields(job);
  const defaults = jobFields(create(JobSchema, {}));
  const chosen = paths.length
    ? paths
    : Object.keys(UPDATABLE).filter((p) => fields[UPDATABLE[p]] !== defaults[UPDATABLE[p]]);
  const patch: Partial<JobFields> = {};
  for (const path of chosen) {
    const key = UPDATABLE[path];
    if (!key) {
      throw new SwitchyardError(
        "invalid_argument",
        `update_mask path "${path}" cannot be updated; use ${Object.keys(UPDATABLE).join(", ")} (status changes through SetJobStatus)`,
        { reason: "INVALID_FIELD", violations: [{ field: "update_mask", description: `"${path}" cannot be updated` }] },
      );
    }
    (patch as Record<string, unknown>)[key] = fields[key];
  }
  return patch;
}

/** A stored job as the API shows it, with its next 5 fire times after `nowMs` and its newest log entry. */
export function jobMessage(job: JobRecord, nowMs: number, lastRun?: JobLogEntry): Job {
  let next: number[] = [];
  try {
    next = nextFires(parseSchedule(job.schedule, job.timeZone), nowMs, 5);
  } catch {
    // A stored schedule is always valid; show no fire times rather than fail a read.
  }
  return create(JobSchema, {
    id: job.id,
    name: job.name,
    group: job.group,
    target: job.target,
    params: job.params,
    schedule: job.schedule,
    timeZone: job.timeZone,
    executePolicy: job.executePolicy as ExecutePolicy,
    sync: job.sync,
    status: fromCode[job.status],
    remark: job.remark,
    misfirePolicy: job.misfirePolicy === "run_once" ? MisfirePolicy.RUN_ONCE : MisfirePolicy.SKIP,
    catchUpWindow: job.catchUpWindowMs ? msDuration(job.catchUpWindowMs) : undefined,
    createTime: msTimestamp(job.createTimeMs),
    updateTime: msTimestamp(job.updateTimeMs),
    createActor: job.createActor,
    updateActor: job.updateActor,
    nextFireTimes: next.map((t) => msTimestamp(t)!),
    lastRun: lastRun && jobLogMessage(lastRun),
  });
}

const runStatus = { succeeded: JobRunStatus.SUCCEEDED, failed: JobRunStatus.FAILED, skipped: JobRunStatus.SKIPPED } as const;
const trigger = { schedule: JobTrigger.SCHEDULE, run_once: JobTrigger.RUN_ONCE, catch_up: JobTrigger.CATCH_UP } as const;

/** A log entry as the API shows it. */
export function jobLogMessage(entry: JobLogEntry): JobLog {
  return create(JobLogSchema, {
    id: entry.id,
    jobId: entry.jobId,
    status: runStatus[entry.status],
    message: entry.message,
    error: entry.error,
    duration: msDuration(entry.durationMs),
    trigger: trigger[entry.trigger],
    instanceId: entry.instanceId,
    tickTime: msTimestamp(entry.tickTimeMs),
    startTime: msTimestamp(entry.startTimeMs),
    fence: BigInt(entry.fence),
  });
}
