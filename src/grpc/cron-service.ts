/**
 * gRPC handlers of switchyard.v1.CronService: each translates messages to a
 * call on the job store or the scheduler and back.
 */
import type * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  BatchDeleteJobsResponseSchema,
  CreateJobResponseSchema,
  type CreateJobRequest,
  DeleteJobResponseSchema,
  GetJobResponseSchema,
  GetSchedulerStatusResponseSchema,
  ListJobLogsResponseSchema,
  type ListJobsRequest,
  ListJobsResponseSchema,
  JobStatus,
  PauseJobResponseSchema,
  ResumeJobResponseSchema,
  RunOnceResponseSchema,
  SetJobStatusResponseSchema,
  type SetJobStatusRequest,
  UpdateJobResponseSchema,
  type UpdateJobRequest,
  type ListJobLogsRequest,
  type PreviewScheduleRequest,
  PreviewScheduleResponseSchema,
} from "../gen/switchyard/v1/cron_pb.js";
import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";
import { PAUSED, RUNNING } from "../cron/job.js";
import type { JobLogStore } from "../cron/job-log.js";
import type { Scheduler } from "../cron/scheduler.js";
import type { JobRecord } from "../cron/job.js";
import type { JobStore } from "../cron/store.js";
import { jobFields, jobLogMessage, jobMessage, jobPatch, statusCode } from "./cron-convert.js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { previewSchedule } from "../cron/schedule.js";
import { msTimestamp } from "./convert.js";
import { unary } from "./status.js";
import { callerOf, refusal } from "./auth-interceptor.js";
import { jobTargetNeeds } from "./access.js";

/** Who made a change: the caller's token name, certificate subject, or "anonymous". */
const actor = (call: grpc.ServerUnaryCall<unknown, unknown>) => callerOf(call.metadata).name;

/** Refuses a job whose queue target the caller may not enqueue onto (the access table cannot see a stored target); checked wherever a call makes a job fire: create, update, run once, resume or publish. */
const mayTarget = (call: grpc.ServerUnaryCall<unknown, unknown>, method: string) => (job: { target: string }) => {
  const err = refusal(method, callerOf(call.metadata), jobTargetNeeds(job.target));
  if (err) throw err;
};

/** The parts CronService works with. */
export interface CronParts {
  store: JobStore;
  logs: JobLogStore;
  scheduler: Scheduler;
  clock: Clock;
}

/** The CronService implementation for grpc-js. */
export function cronServiceHandlers({ store, logs, scheduler, clock }: CronParts, log: Logger): grpc.UntypedServiceImplementation {
  /** Jobs as the API shows them, each with its newest log entry. */
  const showAll = async (jobs: JobRecord[]) => {
    const latest = await logs.latest(jobs.map((j) => j.id));
    const now = clock.now();
    return jobs.map((job) => jobMessage(job, now, latest.get(job.id)));
  };
  const show = async (job: JobRecord) => (await showAll([job]))[0];
  return {
    createJob: unary(log, "CreateJob", async (req: CreateJobRequest, call) =>
      create(CreateJobResponseSchema, { job: await show(await store.create(jobFields(req.job), actor(call))) }),
    ),
    getJob: unary(log, "GetJob", async (req: { id: string }) => create(GetJobResponseSchema, { job: await show(await store.get(req.id)) })),
    listJobs: unary(log, "ListJobs", async (req: ListJobsRequest) => {
      const page = await store.list({
        status: req.status === JobStatus.UNSPECIFIED ? undefined : statusCode(req.status),
        name: req.name,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return create(ListJobsResponseSchema, { jobs: await showAll(page.jobs), nextPageToken: page.nextPageToken });
    }),
    updateJob: unary(log, "UpdateJob", async (req: UpdateJobRequest, call) => {
      const patch = jobPatch(req.job, req.updateMask?.paths ?? []);
      const job = await store.update(req.job?.id ?? "", patch, actor(call), mayTarget(call, "UpdateJob"));
      return create(UpdateJobResponseSchema, { job: await show(job) });
    }),
    deleteJob: unary(log, "DeleteJob", async (req: { id: string }, call) => {
      await store.delete(req.id, actor(call));
      return create(DeleteJobResponseSchema, {});
    }),
    batchDeleteJobs: unary(log, "BatchDeleteJobs", async (req: { ids: string[] }, call) => {
      const ids = [...new Set(req.ids)];
      for (const id of ids) await store.get(id); // all or nothing: refuse before deleting any
      for (const id of ids) await store.delete(id, actor(call));
      return create(BatchDeleteJobsResponseSchema, { deleted: ids.length });
    }),
    pauseJob: unary(log, "PauseJob", async (req: { id: string }, call) =>
      create(PauseJobResponseSchema, { job: await show(await store.setStatus(req.id, PAUSED, actor(call))) }),
    ),
    resumeJob: unary(log, "ResumeJob", async (req: { id: string }, call) =>
      create(ResumeJobResponseSchema, { job: await show(await store.setStatus(req.id, RUNNING, actor(call), mayTarget(call, "ResumeJob"))) }),
    ),
    setJobStatus: unary(log, "SetJobStatus", async (req: SetJobStatusRequest, call) =>
      create(SetJobStatusResponseSchema, {
        job: await show(await store.setStatus(req.id, statusCode(req.status), actor(call), mayTarget(call, "SetJobStatus"))),
      }),
    ),
    runOnce: unary(log, "RunOnce", async (req: { id: string }, call) =>
      create(RunOnceResponseSchema, { runId: await scheduler.runOnce(req.id, mayTarget(call, "RunOnce")) }),
    ),
    getSchedulerStatus: unary(log, "GetSchedulerStatus", async () => {
      const instances = await scheduler.instances();
      return create(GetSchedulerStatusResponseSchema, {
        instances: instances.map((s) => ({
          instanceId: s.instanceId,
          startTime: msTimestamp(s.startTimeMs),
          mountedJobIds: s.mounted,
          mountedCount: s.mounted.length,
          lastSeenTime: msTimestamp(s.lastSeenMs),
        })),
      });
    }),
    previewSchedule: unary(log, "PreviewSchedule", async (req: PreviewScheduleRequest) => {
      const preview = previewSchedule(req.schedule, req.timeZone, req.count, req.startTime ? timestampMs(req.startTime) : clock.now());
      return create(PreviewScheduleResponseSchema, { schedule: preview.schedule, fireTimes: preview.fireTimes.map((t) => msTimestamp(t)!) });
    }),
    listJobLogs: unary(log, "ListJobLogs", async (req: ListJobLogsRequest) => {
      await store.get(req.jobId);
      const page = await logs.list(req.jobId, req.pageSize, req.pageToken);
      return create(ListJobLogsResponseSchema, { logs: page.logs.map(jobLogMessage), nextPageToken: page.nextPageToken });
    }),
  };
}
