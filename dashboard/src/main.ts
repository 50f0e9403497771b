/**
 * The dashboard shell: sign-in, navigation (#/queues, #/cron, #/scheduler),
 * and a refresh of the page on view every 2 seconds while the tab is visible.
 */
import "./style.css";
import { errorText, isUnauthenticated, session, whoAmI } from "./api.js";
import { button, fill, h } from "./dom.js";
import type { Ctx, Page } from "./page.js";
import { queuePage, queuesPage } from "./pages/queues.js";
import { cronPage, jobEditor, jobPage } from "./pages/cron.js";
import { schedulerPage } from "./pages/scheduler.js";

const REFRESH_MS = 2000;
const app = document.getElementById("app")!;

function pageFor(hash: string, ctx: Ctx): Page {
  const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "queues" && parts[1]) return queuePage(parts[1], ctx);
  if (parts[0] === "cron" && parts[1] === "new") return jobEditor(undefined, ctx);
  if (parts[0] === "cron" && parts[1] && parts[2] === "edit") return jobEditor(parts[1], ctx);
  if (parts[0] === "cron" && parts[1]) return jobPage(parts[1], ctx);
  if (parts[0] === "cron") return cronPage(ctx);
  if (parts[0] === "scheduler") return schedulerPage(ctx);
  return queuesPage(ctx);
}

function signIn(message = ""): void {
  // Signed out: no refresh or route change may run behind the form, or its failure would redraw the form.
  window.clearInterval(timer);
  window.onhashchange = null;
  const input = h("input", { type: "password", name: "token", autocomplete: "off", placeholder: "bearer token", "data-testid": "token-input", required: true });
  const form = h("form", { class: "signin", "data-testid": "signin", on: { submit: (e) => {
    e.preventDefault();
    session.token = input.value.trim();
    void start();
  } } },
    h("h1", {}, "Switchyard"),
    h("p", {}, "This server requires a token. It is kept in this tab only."),
    input,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    message && h("p", { class: "error", role: "alert" }, message),
  );
  fill(app, form);
  input.focus();
}

async function start(): Promise<void> {
  let access;
  try {
    access = await whoAmI();
  } catch (err) {
    fill(app, h("p", { class: "error", role: "alert" }, `The server did not answer: ${errorText(err)}`), button("Retry", () => void start()));
    return;
  }
  if (!access) return signIn(session.token ? "That token was not accepted." : "");

  const notice = h("div", { class: "notice", role: "status", "data-testid": "notice" });
  let noticeTimer: number | undefined;
  const main = h("main", {});
  const nav = h("nav", {},
    ...[["#/queues", "Queues"], ["#/cron", "Cron jobs"], ["#/scheduler", "Scheduler"]].map(([href, label]) => h("a", { href, "data-nav": href }, label)),
  );
  const who = h("span", { class: "who", "data-testid": "caller" }, access.name);
  const header = h("header", {},
    h("a", { class: "brand", href: "#/queues" }, "Switchyard"),
    nav,
    h("div", { class: "caller" },
      who,
      access.readOnly && h("span", { class: "badge readonly", "data-testid": "read-only", title: "this token has no write scopes" }, "read-only"),
      access.authEnabled && button("Sign out", () => {
        session.token = "";
        location.hash = "";
        signIn();
      }, { kind: "link" }),
    ),
  );
  fill(app, header, notice, main);

  let page: Page | undefined;
  let epoch = 0;
  const ctx: Ctx = {
    access,
    notify(message, kind = "ok") {
      fill(notice, h("span", { class: kind }, message));
      clearTimeout(noticeTimer);
      noticeTimer = window.setTimeout(() => fill(notice), kind === "error" ? 10_000 : 4000);
    },
    go: (hash) => (location.hash = hash),
    refresh: () => refresh(),
  };
  const refresh = async () => {
    const current = page;
    if (!current) return;
    try {
      await current.refresh();
      main.classList.remove("stale");
    } catch (err) {
      if (isUnauthenticated(err)) return signIn("The token was not accepted any more: sign in again.");
      main.classList.add("stale");
      ctx.notify(errorText(err), "error");
    }
  };
  const show = () => {
    const mine = ++epoch;
    page = pageFor(location.hash, ctx);
    for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", location.hash.startsWith(a.dataset.nav ?? "?"));
    fill(main, page.el);
    void refresh().then(() => mine === epoch && page?.el.setAttribute("data-ready", ""));
  };
  window.onhashchange = show;
  show();
  window.clearInterval(timer);
  timer = window.setInterval(() => {
    if (!document.hidden) void refresh();
  }, REFRESH_MS);
}

let timer: number | undefined;
void start();
