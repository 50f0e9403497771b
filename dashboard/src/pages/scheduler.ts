/** The scheduler: every live instance, when it started, when it was last seen and what it has mounted. */
import { cronApi } from "../api.js";
import { fill, h, table, time } from "../dom.js";
import type { Ctx, Page } from "../page.js";

export function schedulerPage(_ctx: Ctx): Page {
  const body = h("div", {});
  const el = h("section", { "data-testid": "scheduler-page" }, h("h1", {}, "Scheduler"), body);
  return {
    el,
    async refresh() {
      const { instances } = await cronApi.getSchedulerStatus({});
      const rows = instances.map((i) => h("tr", { "data-instance": i.instanceId },
        h("td", { class: "mono" }, i.instanceId),
        h("td", {}, time(i.startTime)),
        h("td", {}, time(i.lastSeenTime)),
        h("td", { class: "num" }, i.mountedCount),
        h("td", { class: "mono small" }, i.mountedJobIds.length
          ? h("details", {}, h("summary", {}, `${i.mountedJobIds.length} jobs`),
            i.mountedJobIds.map((id) => h("a", { href: `#/cron/${encodeURIComponent(id)}`, class: "chip" }, id)))
          : "—"),
      ));
      fill(body, table(["instance", "started", "last seen", "mounted", "jobs"], rows, "No live instances.", "instances"));
    },
  };
}
