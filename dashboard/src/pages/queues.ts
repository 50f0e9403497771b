/** Queues: every declared queue with its counts and rates, and one queue's lists and dead letters. */
import { QueueList, QueueMode, type PeekedItem, type QueueStats } from "../../../src/gen/switchyard/v1/queue_pb.js";
import { allPages, queueApi } from "../api.js";
import { RateHistory, sparkline } from "../chart.js";
import { button, durationMs, fill, h, payloadText, span, table, time } from "../dom.js";
import { act, type Ctx, type Page } from "../page.js";

const PEEK = 20;
const rates = new RateHistory();

function modeName(mode: QueueMode): string {
  return mode === QueueMode.RELIABLE ? "reliable" : mode === QueueMode.SIMPLE ? "simple" : mode === QueueMode.STREAM ? "stream" : "?";
}

const latest = (series: number[]) => (series.length ? `${series[series.length - 1].toFixed(1)}/s` : "—");

/** Samples a queue's counters: a chart of its rates since the page opened, and the latest rates. */
function throughput(stats: QueueStats): HTMLElement {
  const [leased, completed] = rates.add(stats.queue, Date.now(), [Number(stats.leasedTotal), Number(stats.completedTotal)]);
  return h("div", { class: "throughput" },
    sparkline([
      { values: leased, class: "in", label: "leased" },
      { values: completed, class: "out", label: "completed" },
    ]),
    h("small", {}, `leased ${latest(leased)} · done ${latest(completed)}`),
  );
}

/** All queues (ListQueues) with their stats. */
export function queuesPage(_ctx: Ctx): Page {
  const body = h("div", {});
  const el = h("section", { "data-testid": "queues-page" }, h("h1", {}, "Queues"), body);
  return {
    el,
    async refresh() {
      const queues = await allPages(async (pageToken) => {
        const page = await queueApi.listQueues({ pageSize: 1000, pageToken });
        return { items: page.queues, nextPageToken: page.nextPageToken };
      });
      const stats = await Promise.all(queues.map((q) => queueApi.getQueueStats({ name: q.name })));
      const rows = queues.map((q, i) => {
        const s = stats[i].stats!;
        const age = durationMs(s.oldestClaimAge);
        return h("tr", { "data-queue": q.name },
          h("td", {}, h("a", { href: `#/queues/${encodeURIComponent(q.name)}` }, q.name),
            q.paused ? [" ", h("span", { class: "badge paused", "data-testid": "paused" }, "paused")] : null),
          h("td", {}, modeName(q.mode)),
          h("td", { class: "num", "data-testid": "ready" }, s.ready),
          h("td", { class: "num", "data-testid": "processing" }, s.processing),
          h("td", { class: "num", "data-testid": "dead" }, q.mode !== QueueMode.SIMPLE ? s.deadLetter : "—"),
          h("td", { class: "num" }, age === undefined ? "—" : span(age)),
          h("td", { class: "chart" }, throughput(s)),
        );
      });
      fill(body, table(["queue", "mode", "ready", "processing", "dead letters", "oldest claim", "throughput"], rows,
        "No queues are declared: declare one with CreateQueue or the config file.", "queues"));
    },
  };
}

/**
 * A peeked item, with the deliveries recorded for it (for a dead letter, those it had when it was
 * dead-lettered) and why the last one failed (a retry's or dead letter's reason).
 */
function itemRow(item: PeekedItem, actions: HTMLElement[], delayed = false): HTMLTableRowElement {
  const headers = Object.entries(item.headers);
  return h("tr", { "data-item": item.id || "raw" },
    h("td", { class: "mono" }, item.id || h("em", {}, "raw")),
    h("td", {}, time(item.enqueueTime)),
    delayed ? h("td", { "data-testid": "not-before" }, time(item.notBefore)) : null,
    h("td", { class: "num" }, item.deliveryCount),
    h("td", { class: "mono small", "data-testid": "last-error" }, item.lastError || "—"),
    h("td", { class: "mono small" }, headers.length ? headers.map(([k, v]) => h("div", {}, `${k}: ${v}`)) : "—"),
    h("td", { class: "payload mono", "data-testid": "payload" }, payloadText(item.payload)),
    actions.length ? h("td", { class: "actions" }, actions) : null,
  );
}

/** One queue: stats, chart, the next items to leave, dead letters and what an admin may do with them. */
export function queuePage(name: string, ctx: Ctx): Page {
  const admin = { scope: "queue:admin" as const, queue: name };
  const may = ctx.access.can(admin);
  const why = ctx.access.why(admin);
  const statsEl = h("div", { class: "cards", "data-testid": "queue-stats" });
  const readyEl = h("div", {});
  const delayedEl = h("div", {});
  const deadEl = h("div", {});
  const confirmEl = h("div", {});
  const pauseEl = h("span", {});
  /** What the pause button shows (undefined before the first refresh). */
  let shownPaused: boolean | undefined;
  let mode = QueueMode.UNSPECIFIED;
  let ready = 0n;

  const confirmPurge = () =>
    fill(confirmEl, h("div", { class: "confirm", role: "alertdialog", "data-testid": "confirm-purge" },
      h("p", {}, `Delete the ${ready} items waiting in ${name}? Leased items and dead letters stay. This cannot be undone.`),
      button("Purge", () => {
        fill(confirmEl);
        void act(ctx, async () => `Purged ${(await queueApi.purgeQueue({ name })).purged} items from ${name}.`);
      }, { kind: "danger", testid: "confirm-purge-yes" }),
      button("Cancel", () => fill(confirmEl), { testid: "confirm-purge-no" }),
    ));

  const requeue = (ids: string[], all = false) =>
    act(ctx, async () => `Requeued ${(await queueApi.requeueDeadLetters({ name, ids, all })).requeued} dead letters.`);
  const remove = (ids: string[], all = false) =>
    act(ctx, async () => `Deleted ${(await queueApi.deleteDeadLetters({ name, ids, all })).deleted} dead letters.`);

  const el = h("section", { "data-testid": "queue-page" },
    h("p", { class: "crumbs" }, h("a", { href: "#/queues" }, "Queues"), " / "),
    h("h1", {}, name),
    statsEl,
    h("div", { class: "toolbar" },
      pauseEl,
      button("Purge queue…", confirmPurge, { allowed: may, why, kind: "danger", testid: "purge" }),
    ),
    confirmEl,
    h("h2", {}, "Next to lease"),
    readyEl,
    h("h2", {}, "Waiting (delayed or retried with backoff)"),
    delayedEl,
    h("h2", {}, "Dead letters"),
    deadEl,
  );

  return {
    el,
    async refresh() {
      const [{ queue }, { stats }] = await Promise.all([queueApi.getQueue({ name }), queueApi.getQueueStats({ name })]);
      mode = queue!.mode;
      ready = stats!.ready;
      // Pause and resume reach every instance; enqueues still land while paused. The button is made
      // again only when the state changed: one replaced every refresh could take a click's press and
      // lose its release (and a test's click waits for an element that stays put).
      if (queue!.paused !== shownPaused) fill(pauseEl, queue!.paused
        ? button("Resume deliveries", () => void act(ctx, async () => (await queueApi.resumeQueue({ name }), `Resumed deliveries of ${name}.`)),
          { allowed: may, why, testid: "resume-queue" })
        : button("Pause deliveries", () => void act(ctx, async () => (await queueApi.pauseQueue({ name }), `Paused deliveries of ${name}; enqueues still land.`)),
          { allowed: may, why, testid: "pause-queue" }));
      shownPaused = queue!.paused;
      const age = durationMs(stats!.oldestClaimAge);
      fill(statsEl,
        [["mode", modeName(mode)], ["deliveries", stats!.paused ? "paused" : "running"], ["ready", stats!.ready],
          ["delayed", stats!.delayed], ["processing", stats!.processing],
          ["dead letters", mode !== QueueMode.SIMPLE ? stats!.deadLetter : "—"],
          ["oldest claim", age === undefined ? "—" : span(age)], ["streams here", stats!.leaseStreams]]
          .map(([label, value]) => h("div", { class: "card", "data-stat": String(label) }, h("small", {}, String(label)), h("strong", {}, String(value)))),
        h("div", { class: "card wide" }, h("small", {}, "throughput (leased / completed per second)"), throughput(stats!)),
      );
      const stream = mode === QueueMode.STREAM;
      if (stream) {
        // A stream keeps its entries as history: show where each consumer group is instead.
        const groups = stats!.groups.map((g) => {
          const idle = durationMs(g.oldestPendingIdle);
          return h("tr", { "data-group": g.name },
            h("td", {}, g.name), h("td", { class: "num" }, g.pending), h("td", { class: "num" }, g.lag < 0n ? "?" : g.lag),
            h("td", { class: "num" }, idle === undefined ? "—" : span(idle)), h("td", { class: "num" }, g.consumers), h("td", { class: "mono" }, g.lastDeliveredId));
        });
        fill(readyEl, table(["consumer group", "pending", "lag", "oldest pending idle", "consumers", "last delivered"], groups, "No consumer groups.", "groups"));
        fill(delayedEl, h("p", { class: "muted" }, "A STREAM queue's retries wait in its groups' pending lists."));
      } else {
        const readyItems = await queueApi.peekQueue({ name, list: QueueList.READY, limit: PEEK });
        fill(readyEl, table(["id", "enqueued", "deliveries", "last error", "headers", "payload"], readyItems.items.map((i) => itemRow(i, [])),
          "Nothing is waiting.", "ready-items"),
          readyItems.total > BigInt(readyItems.items.length) && h("p", { class: "muted" }, `Showing ${readyItems.items.length} of ${readyItems.total}.`));
        const delayed = await queueApi.peekQueue({ name, list: QueueList.DELAYED, limit: PEEK });
        fill(delayedEl, table(["id", "enqueued", "not before", "deliveries", "last error", "headers", "payload"], delayed.items.map((i) => itemRow(i, [], true)),
          "Nothing is waiting for its time.", "delayed-items"),
          delayed.total > BigInt(delayed.items.length) && h("p", { class: "muted" }, `Showing the first ${delayed.items.length} of ${delayed.total}.`));
      }
      if (mode === QueueMode.SIMPLE) {
        fill(deadEl, h("p", { class: "muted" }, "A SIMPLE queue has no dead-letter list."));
        return;
      }
      const dead = await queueApi.peekQueue({ name, list: QueueList.DEAD_LETTER, limit: PEEK });
      const rows = dead.items.map((i) => itemRow(i, i.id ? [
        button("Requeue", () => void requeue([i.id]), { allowed: may, why, testid: "requeue" }),
        button("Delete", () => void remove([i.id]), { allowed: may, why, kind: "danger", testid: "delete" }),
      ] : [h("span", { class: "muted" }, "raw: use all")]));
      fill(deadEl,
        h("div", { class: "toolbar" },
          button("Requeue all", () => void requeue([], true), { allowed: may && dead.total > 0n, why, testid: "requeue-all" }),
          button("Delete all", () => void remove([], true), { allowed: may && dead.total > 0n, why, kind: "danger", testid: "delete-all" }),
        ),
        table(["id", "enqueued", "deliveries", "last error", "headers", "payload", ""], rows, "No dead letters.", "dead-items"),
        dead.total > BigInt(dead.items.length) && h("p", { class: "muted" }, `Showing the oldest ${dead.items.length} of ${dead.total}.`),
      );
    },
  };
}
