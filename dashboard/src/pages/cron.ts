/** Cron jobs: the list with controls, one job with its log, and the editor with a live schedule preview. */
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import {
  ExecutePolicy, JobRunStatus, JobSchema, JobStatus, JobTrigger, MisfirePolicy, type Job, type JobLog,
} from "../../../src/gen/switchyard/v1/cron_pb.js";
import type { Need } from "../../../src/auth/scopes.js";
import { allPages, cronApi, errorText } from "../api.js";
import { button, durationMs, fill, h, span, table, time } from "../dom.js";
import { act, type Ctx, type Page } from "../page.js";

const STATUS: Record<number, string> = {
  [JobStatus.UNPUBLISHED]: "unpublished", [JobStatus.RUNNING]: "running", [JobStatus.PAUSED]: "paused",
};
const RUN: Record<number, string> = {
  [JobRunStatus.SUCCEEDED]: "succeeded", [JobRunStatus.FAILED]: "failed", [JobRunStatus.SKIPPED]: "skipped",
};
const TRIGGER: Record<number, string> = {
  [JobTrigger.SCHEDULE]: "schedule", [JobTrigger.RUN_ONCE]: "run once", [JobTrigger.CATCH_UP]: "catch-up",
};

const badge = (text: string, kind = text) => h("span", { class: `badge ${kind}` }, text);

function lastResult(log: JobLog | undefined): HTMLElement | string {
  if (!log) return "—";
  const what = RUN[log.status] ?? "?";
  return h("span", { title: log.error || log.message },
    badge(what), " ", time(log.startTime ?? log.tickTime), log.message || log.error ? h("div", { class: "small muted" }, log.error || log.message) : null);
}

/** The buttons that move a job along its state diagram, run it once, or open its editor. */
function controls(job: Job, ctx: Ctx, extra: HTMLElement[] = []): HTMLElement {
  const can = (scope: Need["scope"]) => ({ allowed: ctx.access.can({ scope }), why: ctx.access.why({ scope }) });
  const id = job.id;
  const buttons: HTMLElement[] = [];
  if (job.status === JobStatus.UNPUBLISHED) {
    buttons.push(button("Publish", () => void act(ctx, async () => (await cronApi.resumeJob({ id }), `Published ${job.name}: it runs on schedule.`)),
      { ...can("sys:job:resume"), kind: "primary", testid: "publish" }));
  }
  if (job.status === JobStatus.RUNNING) {
    buttons.push(button("Pause", () => void act(ctx, async () => (await cronApi.pauseJob({ id }), `Paused ${job.name}.`)),
      { ...can("sys:job:pause"), testid: "pause" }));
  }
  if (job.status === JobStatus.PAUSED) {
    buttons.push(button("Resume", () => void act(ctx, async () => (await cronApi.resumeJob({ id }), `Resumed ${job.name}.`)),
      { ...can("sys:job:resume"), kind: "primary", testid: "resume" }));
  }
  buttons.push(button("Run once", () => void act(ctx, async () => `Started a run of ${job.name} (log ${(await cronApi.runOnce({ id })).runId}).`),
    { ...can("sys:job:execute"), testid: "run-once" }));
  buttons.push(button("Edit", () => ctx.go(`#/cron/${encodeURIComponent(id)}/edit`), { ...can("sys:job:update"), testid: "edit" }));
  return h("div", { class: "actions" }, buttons, extra);
}

/** Every job (ListJobs), with status, schedule, next fire time and last result. */
export function cronPage(ctx: Ctx): Page {
  const body = h("div", {});
  const add = { scope: "sys:job:add" as const };
  const el = h("section", { "data-testid": "cron-page" },
    h("div", { class: "title-row" },
      h("h1", {}, "Cron jobs"),
      button("New job", () => ctx.go("#/cron/new"), { allowed: ctx.access.can(add), why: ctx.access.why(add), kind: "primary", testid: "new-job" }),
    ),
    body,
  );
  return {
    el,
    async refresh() {
      const jobs = await allPages(async (pageToken) => {
        const page = await cronApi.listJobs({ pageSize: 1000, pageToken });
        return { items: page.jobs, nextPageToken: page.nextPageToken };
      });
      const rows = jobs.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, h("a", { href: `#/cron/${encodeURIComponent(j.id)}` }, j.name), h("div", { class: "small muted mono" }, j.id)),
        h("td", {}, badge(STATUS[j.status] ?? "?")),
        h("td", { class: "mono" }, j.schedule),
        h("td", {}, j.timeZone || "UTC"),
        h("td", {}, time(j.nextFireTimes[0], j.timeZone || "UTC")),
        h("td", {}, lastResult(j.lastRun)),
        h("td", {}, controls(j, ctx)),
      ));
      fill(body, table(["job", "status", "schedule", "time zone", "next fire", "last result", ""], rows, "No cron jobs yet.", "jobs"));
    },
  };
}

function logRow(l: JobLog): HTMLTableRowElement {
  const ms = durationMs(l.duration);
  return h("tr", { "data-log": l.id },
    h("td", {}, time(l.startTime ?? l.tickTime)),
    h("td", {}, TRIGGER[l.trigger] ?? "?"),
    h("td", {}, badge(RUN[l.status] ?? "?")),
    h("td", { class: "log-text" }, l.error ? h("span", { class: "error" }, l.error) : l.message || "—"),
    h("td", { class: "num" }, ms === undefined ? "—" : span(ms)),
    h("td", { class: "mono small" }, l.instanceId),
  );
}

const LOG_PAGE = 20;

/** One job: its fields, next fire times, controls, and its log, newest first, a page at a time. */
export function jobPage(id: string, ctx: Ctx): Page {
  const head = h("div", {});
  const logs = h("div", {});
  const pager = h("div", { class: "toolbar" });
  const tokens = [""]; // the page tokens that led here; the last is the page shown
  const el = h("section", { "data-testid": "job-page" },
    h("p", { class: "crumbs" }, h("a", { href: "#/cron" }, "Cron jobs"), " / "),
    head, h("h2", {}, "Log"), logs, pager);
  const page = async () => {
    const res = await cronApi.listJobLogs({ jobId: id, pageSize: LOG_PAGE, pageToken: tokens[tokens.length - 1] });
    fill(logs, table(["time", "trigger", "result", "message", "duration", "instance"], res.logs.map(logRow), "No runs or skipped ticks yet.", "job-log"));
    fill(pager,
      button("Newest", () => { tokens.length = 1; void ctx.refresh(); }, { allowed: tokens.length > 1, testid: "log-newest" }),
      button("Newer", () => { tokens.pop(); void ctx.refresh(); }, { allowed: tokens.length > 1, testid: "log-newer" }),
      button("Older", () => { tokens.push(res.nextPageToken); void ctx.refresh(); }, { allowed: res.nextPageToken !== "", testid: "log-older" }),
      h("span", { class: "muted" }, `page ${tokens.length}`),
    );
  };
  return {
    el,
    async refresh() {
      const { job } = await cronApi.getJob({ id });
      const j = job!;
      const tz = j.timeZone || "UTC";
      fill(head,
        h("div", { class: "title-row" }, h("h1", {}, j.name), badge(STATUS[j.status] ?? "?")),
        h("dl", { class: "fields" },
          [["id", j.id], ["target", j.target], ["schedule", j.schedule], ["time zone", tz],
            ["execute policy", ExecutePolicy[j.executePolicy] ?? "?"], ["misfire", MisfirePolicy[j.misfirePolicy] ?? "?"],
            ["params", j.params || "—"], ["remark", j.remark || "—"], ["changed by", j.updateActor || j.createActor || "—"]]
            .flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, v)]),
        ),
        h("h2", {}, "Next fire times"),
        h("ol", { class: "fires", "data-testid": "next-fires" }, j.nextFireTimes.map((t) => h("li", {}, time(t, tz), " ", h("small", { class: "muted" }, tz)))),
        controls(j, ctx),
      );
      await page();
    },
  };
}

/** Fields of the editor, and how each reads from and into a Job. */
function field(label: string, input: HTMLElement, hint?: string): HTMLElement {
  return h("label", { class: "field" }, h("span", {}, label), input, hint && h("small", { class: "muted" }, hint));
}

const EDITABLE = ["name", "group", "target", "params", "schedule", "time_zone", "execute_policy", "sync", "remark", "misfire_policy", "catch_up_window"];

/** Create (no id) or edit a job, with the next fire times of the schedule as it is typed. */
export function jobEditor(id: string | undefined, ctx: Ctx): Page {
  const input = (name: string, attrs: Record<string, unknown> = {}) => h("input", { name, "data-testid": `field-${name}`, ...attrs });
  const name = input("name", { required: true });
  const group = input("group");
  const target = input("target", { required: true, placeholder: "https://…, HelloWorld, or queue:<name>" });
  const params = h("textarea", { name: "params", rows: 3, "data-testid": "field-params", placeholder: "{\"key\": \"value\"}" });
  const schedule = input("schedule", { required: true, placeholder: "0 */5 * * * *", class: "mono" });
  const timeZone = input("time_zone", { value: "UTC", list: "zones" });
  const policy = h("select", { name: "execute_policy", "data-testid": "field-execute_policy" },
    h("option", { value: ExecutePolicy.SINGLETON }, "singleton: skip a tick while the last run goes on"),
    h("option", { value: ExecutePolicy.CONCURRENT }, "concurrent: every tick runs"),
    h("option", { value: ExecutePolicy.ABANDON }, "abandon: a run that cannot take the lock gives up"));
  const misfire = h("select", { name: "misfire_policy", "data-testid": "field-misfire_policy" },
    h("option", { value: MisfirePolicy.SKIP }, "skip missed ticks"),
    h("option", { value: MisfirePolicy.RUN_ONCE }, "run the latest missed tick once"));
  const catchUp = input("catch_up_window", { type: "number", min: 0, value: 0 });
  const sync = input("sync", { type: "checkbox" });
  const remark = input("remark");
  const preview = h("div", { class: "preview", "data-testid": "preview", "aria-live": "polite" });
  const error = h("p", { class: "error", role: "alert", "data-testid": "form-error" });
  const zones = h("datalist", { id: "zones" }, Intl.supportedValuesOf("timeZone").map((z) => h("option", { value: z })));
  let original: Job | undefined;

  let previewTimer: number | undefined;
  let previewSeq = 0;
  const updatePreview = () => {
    window.clearTimeout(previewTimer);
    previewTimer = window.setTimeout(async () => {
      const mine = ++previewSeq;
      if (!schedule.value.trim()) return fill(preview, h("p", { class: "muted" }, "Type a schedule to see when it fires."));
      try {
        const res = await cronApi.previewSchedule({ schedule: schedule.value, timeZone: timeZone.value, count: 5 });
        if (mine !== previewSeq) return;
        const tz = timeZone.value || "UTC";
        fill(preview, h("p", {}, `Next fire times (${tz}) of `, h("code", {}, res.schedule), ":"),
          h("ol", { "data-testid": "preview-times" }, res.fireTimes.map((t) => h("li", {}, time(t, tz)))));
      } catch (err) {
        if (mine === previewSeq) fill(preview, h("p", { class: "error", "data-testid": "preview-error" }, errorText(err)));
      }
    }, 250);
  };
  schedule.addEventListener("input", updatePreview);
  timeZone.addEventListener("input", updatePreview);

  const jobFromForm = () =>
    create(JobSchema, {
      id: id ?? "",
      name: name.value.trim(),
      group: group.value.trim(),
      target: target.value.trim(),
      params: params.value,
      schedule: schedule.value.trim(),
      timeZone: timeZone.value.trim(),
      executePolicy: Number(policy.value),
      misfirePolicy: Number(misfire.value),
      catchUpWindow: Number(catchUp.value) > 0 ? { seconds: BigInt(Math.round(Number(catchUp.value))), nanos: 0 } : undefined,
      sync: sync.checked,
      remark: remark.value,
    });

  const save = async (e: Event) => {
    e.preventDefault();
    fill(error);
    try {
      const job = jobFromForm();
      const saved = id
        ? (await cronApi.updateJob({ job, updateMask: create(FieldMaskSchema, { paths: EDITABLE }) })).job!
        : (await cronApi.createJob({ job })).job!;
      ctx.notify(id ? `Saved ${saved.name}.` : `Created ${saved.name} (unpublished: publish it to schedule it).`);
      ctx.go(`#/cron/${encodeURIComponent(saved.id)}`);
    } catch (err) {
      fill(error, errorText(err));
    }
  };
  const need = { scope: id ? ("sys:job:update" as const) : ("sys:job:add" as const) };
  const allowed = ctx.access.can(need);
  const form = h("form", { class: "editor", "data-testid": "job-form", on: { submit: (e) => void save(e) } },
    field("Name", name), field("Group", group), field("Target", target, "an http(s) URL, a handler (HelloWorld, SendSms, LogClean), or queue:<name>"),
    field("Params (JSON)", params),
    field("Schedule", schedule, "6 fields with seconds (0 */5 * * * *), # and 5 fields (# 0 9 * * 1-5), or @every 30s"),
    field("Time zone", timeZone), zones, preview,
    field("Execute policy", policy), field("Misfire policy", misfire), field("Catch-up window (seconds)", catchUp),
    h("label", { class: "field check" }, sync, h("span", {}, "Run inside the scheduler's dispatch (sync)")),
    field("Remark", remark),
    error,
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary", disabled: !allowed, title: allowed ? undefined : ctx.access.why(need), "data-testid": "save" }, id ? "Save" : "Create"),
      h("a", { href: id ? `#/cron/${encodeURIComponent(id)}` : "#/cron" }, "Cancel")),
  );
  const el = h("section", { "data-testid": "job-editor" },
    h("p", { class: "crumbs" }, h("a", { href: "#/cron" }, "Cron jobs"), " / "),
    h("h1", {}, id ? "Edit job" : "New job"), form);
  return {
    el,
    async refresh() {
      if (!id || original) return; // the form is the user's once loaded: polling must not overwrite it
      original = (await cronApi.getJob({ id })).job!;
      name.value = original.name;
      group.value = original.group;
      target.value = original.target;
      params.value = original.params;
      schedule.value = original.schedule;
      timeZone.value = original.timeZone || "UTC";
      policy.value = String(original.executePolicy || ExecutePolicy.SINGLETON);
      misfire.value = String(original.misfirePolicy || MisfirePolicy.SKIP);
      catchUp.value = String(Math.round((durationMs(original.catchUpWindow) ?? 0) / 1000));
      sync.checked = original.sync;
      remark.value = original.remark;
      updatePreview();
    },
  };
}
