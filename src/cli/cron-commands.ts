/** `switchyard cron list|create|update|pause|resume|run|logs|preview`. */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  ExecutePolicy,
  type Job,
  type JobLog,
  JobLogSchema,
  JobRunStatus,
  type JobSchema,
  JobSchema as JobDesc,
  JobStatus,
  JobTrigger,
  MisfirePolicy,
  PreviewScheduleResponseSchema,
} from "../gen/switchyard/v1/cron_pb.js";
import { UsageError, choice, durationArg, intArg, need, parse, str, type OptionSpecs, type Values } from "./args.js";
import { duration, enumName, fields, json, pj, table, time } from "./format.js";
import type { Command } from "./command.js";

const policies = ["concurrent", "singleton", "abandon"] as const;
const misfires = ["skip", "run_once"] as const;

/** Options that set a job's fields (create and update). */
const jobOptions = {
  name: { type: "string" },
  target: { type: "string" },
  schedule: { type: "string" },
  tz: { type: "string" },
  params: { type: "string" },
  group: { type: "string" },
  remark: { type: "string" },
  policy: { type: "string" },
  sync: { type: "boolean" },
  misfire: { type: "string" },
  "catch-up-window": { type: "string" },
} as const satisfies OptionSpecs;

/** The job fields the flags set, and their update_mask paths. */
function jobFromFlags(values: Values): { job: MessageInitShape<typeof JobSchema>; paths: string[] } {
  const job: MessageInitShape<typeof JobSchema> & Record<string, unknown> = {};
  const paths: string[] = [];
  const set = (path: string, key: string, value: unknown) => {
    job[key] = value;
    paths.push(path);
  };
  for (const [flag, path, key] of [
    ["name", "name", "name"],
    ["target", "target", "target"],
    ["schedule", "schedule", "schedule"],
    ["tz", "time_zone", "timeZone"],
    ["params", "params", "params"],
    ["group", "group", "group"],
    ["remark", "remark", "remark"],
  ] as const) {
    const v = str(values, flag);
    if (v !== undefined) set(path, key, v);
  }
  const policy = str(values, "policy");
  if (policy !== undefined) set("execute_policy", "executePolicy", policies.indexOf(choice("--policy", policy, policies)) + 1);
  if (values.sync !== undefined) set("sync", "sync", values.sync === true);
  const misfire = str(values, "misfire");
  if (misfire !== undefined) {
    set("misfire_policy", "misfirePolicy", choice("--misfire", misfire, misfires) === "skip" ? MisfirePolicy.SKIP : MisfirePolicy.RUN_ONCE);
  }
  const window = str(values, "catch-up-window");
  if (window !== undefined) set("catch_up_window", "catchUpWindow", durationFromMs(durationArg("--catch-up-window", window)));
  return { job, paths };
}

const status = (j: Job) => enumName(JobStatus, j.status, "JOB_STATUS_");
const policy = (j: Job) => enumName(ExecutePolicy, j.executePolicy, "EXECUTE_POLICY_");

function describeJob(j: Job): string {
  return fields([
    ["id", j.id],
    ["name", j.name],
    ["group", j.group || "-"],
    ["target", j.target],
    ["params", j.params || "-"],
    ["schedule", j.schedule],
    ["time zone", j.timeZone || "UTC"],
    ["status", status(j)],
    ["execute policy", policy(j)],
    ["sync", String(j.sync)],
    ["misfire policy", enumName(MisfirePolicy, j.misfirePolicy, "MISFIRE_POLICY_")],
    ["next fire times", j.nextFireTimes.map((t) => time(t)).join(", ") || "-"],
  ]);
}

const jobJson = (j: Job) => ({ job: pj(JobDesc, j) });

const listJobs: Command = {
  usage: "cron list [--status running|paused|unpublished] [--name TEXT]",
  options: { status: { type: "string" }, name: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    need(positionals, []);
    const s = str(values, "status");
    const wanted = s === undefined ? JobStatus.UNSPECIFIED : [JobStatus.UNPUBLISHED, JobStatus.RUNNING, JobStatus.PAUSED][
      ["unpublished", "running", "paused"].indexOf(choice("--status", s, ["unpublished", "running", "paused"] as const))
    ];
    const jobs: Job[] = [];
    let pageToken = "";
    for (let page = 0; page < 100; page++) {
      const res = await client.listJobs({ status: wanted, name: str(values, "name") ?? "", pageSize: 1000, pageToken });
      jobs.push(...res.jobs);
      pageToken = res.nextPageToken;
      if (!pageToken) break;
    }
    if (globals.json) return io.out(json({ jobs: jobs.map((j) => pj(JobDesc, j)) }));
    const rows = jobs.map((j) => [j.id, j.name, j.target, j.schedule, j.timeZone || "UTC", status(j), policy(j), time(j.nextFireTimes[0])]);
    io.out(table(["ID", "NAME", "TARGET", "SCHEDULE", "TZ", "STATUS", "POLICY", "NEXT-FIRE"], rows));
  },
};

const createJob: Command = {
  usage:
    "cron create --name NAME --target TARGET --schedule EXPR [--tz ZONE] [--params TEXT] [--group G] [--remark R] " +
    "[--policy concurrent|singleton|abandon] [--sync] [--misfire skip|run-once] [--catch-up-window D]   (created unpublished: resume it)",
  options: jobOptions,
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    need(positionals, []);
    for (const required of ["name", "target", "schedule"]) if (str(values, required) === undefined) throw new UsageError(`--${required} is required`);
    const created = await client.createJob(jobFromFlags(values).job);
    if (globals.json) return io.out(json(jobJson(created)));
    io.out(`created job ${created.id} (unpublished; start it with: switchyard cron resume ${created.id})\n`);
    io.out(describeJob(created));
  },
};

const updateJob: Command = {
  usage: "cron update ID [the options of create]   (only the fields given change)",
  options: jobOptions,
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [id] = need(positionals, ["ID"]);
    const { job, paths } = jobFromFlags(values);
    if (paths.length === 0) throw new UsageError("give at least one field to change, e.g. --schedule");
    const updated = await client.updateJob({ ...job, id }, paths);
    if (globals.json) return io.out(json(jobJson(updated)));
    io.out(`updated job ${id}: ${paths.join(", ")}\n`);
    io.out(describeJob(updated));
  },
};

function statusCommand(verb: "pause" | "resume"): Command {
  return {
    usage: `cron ${verb} ID`,
    options: {},
    async run({ argv, globals, connect, io }) {
      const client = connect();
      const [id] = need(parse(argv, this.options).positionals, ["ID"]);
      const job = verb === "pause" ? await client.pauseJob(id) : await client.resumeJob(id);
      if (globals.json) return io.out(json(jobJson(job)));
      io.out(`job ${job.id} is ${status(job)}\n`);
    },
  };
}

const logRow = (l: JobLog) => [
  l.id,
  enumName(JobRunStatus, l.status, "JOB_RUN_STATUS_"),
  enumName(JobTrigger, l.trigger, "JOB_TRIGGER_"),
  time(l.startTime),
  duration(l.duration),
  String(l.fence),
  l.error || l.message || "-",
];
const logHeaders = ["RUN", "STATUS", "TRIGGER", "STARTED", "DURATION", "FENCE", "MESSAGE"];

const runJob: Command = {
  usage: "cron run ID [--wait] [--wait-timeout 30s]   (runs it once now; --wait prints its log entry)",
  options: { wait: { type: "boolean" }, "wait-timeout": { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [id] = need(positionals, ["ID"]);
    const runId = await client.runOnce(id);
    if (values.wait !== true) return io.out(globals.json ? json({ runId }) : `started run ${runId} of job ${id}\n`);
    const waitText = str(values, "wait-timeout");
    const deadline = Date.now() + (waitText ? durationArg("--wait-timeout", waitText) : 30_000);
    for (;;) {
      const entry = (await client.listJobLogs(id, 50)).logs.find((l) => l.id === runId);
      if (entry) {
        if (globals.json) return io.out(json({ runId, log: pj(JobLogSchema, entry) }));
        return io.out(table(logHeaders, [logRow(entry)]));
      }
      if (Date.now() > deadline) throw new Error(`run ${runId} wrote no log entry within the wait timeout`);
      await new Promise((r) => setTimeout(r, 100));
    }
  },
};

const logs: Command = {
  usage: "cron logs ID [--limit N]   (newest first; default 20)",
  options: { limit: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [id] = need(positionals, ["ID"]);
    const limitText = str(values, "limit");
    const limit = limitText === undefined ? 20 : intArg("--limit", limitText);
    const page = await client.listJobLogs(id, Math.min(Math.max(limit, 1), 1000));
    const entries = page.logs.slice(0, limit);
    if (globals.json) return io.out(json({ logs: entries.map((l) => pj(JobLogSchema, l)) }));
    io.out(table(logHeaders, entries.map(logRow)));
  },
};

const preview: Command = {
  usage: 'cron preview "SCHEDULE" [--tz ZONE] [--count N]   (next fire times; checks the schedule as create does)',
  options: { tz: { type: "string" }, count: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const { values, positionals } = parse(argv, this.options);
    const [schedule] = need(positionals, ["SCHEDULE"]);
    const count = str(values, "count");
    const res = await connect().previewSchedule(schedule, str(values, "tz") ?? "", count === undefined ? 0 : intArg("--count", count));
    if (globals.json) return io.out(json(pj(PreviewScheduleResponseSchema, res)));
    io.out(`${res.schedule}\n${res.fireTimes.map((t) => time(t)).join("\n")}\n`);
  },
};

/** The cron commands by name. */
export const cronCommands: Record<string, Command> = {
  list: listJobs,
  create: createJob,
  update: updateJob,
  pause: statusCommand("pause"),
  resume: statusCommand("resume"),
  run: runJob,
  logs,
  preview,
};
