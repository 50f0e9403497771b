/**
 * Cron jobs as stored (SPEC C1–C4, C14) and their validation. Status is seed
 * 001's: 0 unpublished, 1 running, 2 paused, and as in the seed's status API
 * any status may be set from any other (SPEC C2): 1 mounts, any other
 * unmounts. Create stores 0; delete is soft from any state; RunOnce changes
 * nothing; setting the state a job is already in is a no-op.
 */
import { invalid } from "../errors.js";
import { checkTimeZone, parseSchedule, type Schedule } from "./schedule.js";

/** The seed's status numbers. */
export const UNPUBLISHED = 0;
export const RUNNING = 1;
export const PAUSED = 2;
export type JobStatusCode = typeof UNPUBLISHED | typeof RUNNING | typeof PAUSED;

/** The seed's execute policies: 1 concurrent, 2 singleton (default), 3 abandon. */
export type ExecutePolicyCode = 1 | 2 | 3;
export type MisfirePolicyName = "skip" | "run_once";

/** A job as stored in Redis. */
export interface JobRecord {
  id: string;
  name: string;
  group: string;
  target: string;
  params: string;
  schedule: string;
  timeZone: string;
  executePolicy: ExecutePolicyCode;
  sync: boolean;
  status: JobStatusCode;
  remark: string;
  misfirePolicy: MisfirePolicyName;
  catchUpWindowMs: number;
  createTimeMs: number;
  updateTimeMs: number;
  createActor: string;
  updateActor: string;
  /** When the job last became RUNNING: ticks before it are owed nothing. */
  activeSinceMs: number;
  deleted: boolean;
  /**
   * Counts the record's writes (1 at create): schedulers mount the newest
   * version they have read, whatever the clock said (two updates may share a
   * millisecond), and ignore a read older than one they acted on. Absent (0)
   * in records written before it existed.
   */
  version?: number;
}

/** A record's version; 0 for records written before versions existed. */
export const versionOf = (job: Pick<JobRecord, "version">): number => job.version ?? 0;

/** The fields a caller sets. */
export type JobFields = Pick<
  JobRecord,
  "name" | "group" | "target" | "params" | "schedule" | "timeZone" | "executePolicy" | "sync" | "remark" | "misfirePolicy" | "catchUpWindowMs"
>;

/** Field names (snake_case, as in the proto) that UpdateJob may change. */
export const UPDATABLE: Record<string, keyof JobFields> = {
  name: "name",
  group: "group",
  target: "target",
  params: "params",
  schedule: "schedule",
  time_zone: "timeZone",
  execute_policy: "executePolicy",
  sync: "sync",
  remark: "remark",
  misfire_policy: "misfirePolicy",
  catch_up_window: "catchUpWindowMs",
};

const HANDLER_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,99}$/;

function checkTarget(target: string): void {
  if (!target) throw invalid("target is required: an http(s):// URL, a handler name, or queue:<name>", "job.target");
  if (/^https?:\/\//i.test(target)) {
    try {
      new URL(target);
    } catch {
      throw invalid(`target "${target}" is not a valid URL`, "job.target");
    }
    return;
  }
  if (target.startsWith("queue:")) {
    if (target.length === "queue:".length) throw invalid('target "queue:" needs a queue name, e.g. queue:{thumbnails}', "job.target");
    return;
  }
  if (!HANDLER_NAME.test(target)) {
    throw invalid(`target "${target}" is neither an http(s):// URL, queue:<name>, nor a handler name (letters, digits, _ . -)`, "job.target");
  }
}

/** The largest params a job may have: an item's default payload limit, which a `queue:` target's params become. */
const MAX_PARAMS_BYTES = 1 << 20;

/** Validates fields and fills defaults; returns them with the parsed schedule (normalised expression). */
export function validateJobFields(fields: JobFields): { fields: JobFields; schedule: Schedule } {
  const name = fields.name.trim();
  if (!name) throw invalid("name is required", "job.name");
  if (name.length > 200) throw invalid("name is longer than 200 characters", "job.name");
  if (/\p{Cc}/u.test(name)) throw invalid("name contains control characters; use printable text", "job.name");
  checkTarget(fields.target);
  const paramsBytes = Buffer.byteLength(fields.params);
  if (paramsBytes > MAX_PARAMS_BYTES) {
    throw invalid(`params is ${paramsBytes} bytes; at most ${MAX_PARAMS_BYTES} (1 MiB): keep large data elsewhere and pass a reference`, "job.params");
  }
  if (fields.params.trim()) {
    try {
      JSON.parse(fields.params);
    } catch (err) {
      throw invalid(`params must be JSON text: ${err instanceof Error ? err.message : String(err)}`, "job.params");
    }
  }
  const timeZone = fields.timeZone || "UTC";
  checkTimeZone(timeZone); // interval schedules ignore it, but a later cron schedule would not
  const schedule = parseSchedule(fields.schedule, timeZone);
  if (![1, 2, 3].includes(fields.executePolicy)) throw invalid("execute_policy must be CONCURRENT (1), SINGLETON (2) or ABANDON (3)", "job.execute_policy");
  if (fields.misfirePolicy === "run_once" && fields.catchUpWindowMs <= 0) {
    throw invalid("misfire_policy RUN_ONCE needs a catch_up_window (how late a missed tick may still run), e.g. 10m", "job.catch_up_window");
  }
  if (fields.catchUpWindowMs < 0) throw invalid("catch_up_window must not be negative", "job.catch_up_window");
  return { fields: { ...fields, name, timeZone, schedule: schedule.expression }, schedule };
}
