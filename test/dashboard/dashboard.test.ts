/// <reference lib="dom" />
/**
 * Issue #7: the web dashboard end to end. A real redis-server, a real
 * in-process instance with authentication on, and Debian's Chromium driven by
 * playwright-core against the built page (`npm run build` → dist/dashboard).
 * Work is set up through the gRPC client, as a worker or producer would, and
 * the page is read and clicked as a person would. Nothing waits on a timer:
 * every wait is for a DOM condition or a polled value.
 */
import { readFileSync } from "node:fs";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { JobStatus } from "../../src/gen/switchyard/v1/cron_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { launchChromium, screenshot, VIEWPORTS } from "../helpers/browser.js";

const ADMIN = "admin-token-7f3a9c";
const VIEWER = "viewer-token-1b2d4e";
const TOKENS = JSON.stringify([
  { name: "admin", sha256: tokenHash(ADMIN), scopes: ["*"] },
  { name: "viewer", sha256: tokenHash(VIEWER), scopes: ["queue:read", "sys:job:list"] },
]);
/** Where the page keeps the token (dashboard/src/api.ts). */
const TOKEN_KEY = "switchyard.token";
/** Longer than two of the page's 2 s refreshes, for a loaded machine. */
const SEEN = { timeout: 10_000 };
const XSS = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`;

let redis: TestRedis;
let sy: TestSwitchyard;
let browser: Browser;
let http: string;
let dashboard: string;
/** A browser context per token (and one without), made once: each test opens its own tabs in them. */
const contexts = new Map<string, BrowserContext>();
/** Tabs opened by the current test, closed after it. */
let pages: Page[] = [];
/** Uncaught page errors and CSP violations seen by the current test's pages. */
let problems: string[] = [];

beforeAll(async () => {
  const [r, b] = await Promise.all([startRedis(), launchChromium()]);
  redis = r;
  browser = b;
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_AUTH_TOKENS: TOKENS }, token: ADMIN });
  http = `http://${sy.app.httpAddress}`;
  dashboard = `${http}/dashboard/`;
});

afterAll(async () => {
  await Promise.all([...contexts.values()].map((c) => c.close()));
  await browser?.close();
  await sy?.stop();
  await redis?.stop();
});

beforeEach(() => {
  pages = [];
  problems = [];
});

afterEach(async () => {
  await Promise.all(pages.map((p) => p.close()));
  expect(problems, "page errors or content security policy violations").toEqual([]);
});

/** The context for `token` (none: signed out), with the token put where the page keeps it before it loads. */
async function contextFor(token = "", options: { clock?: boolean } = {}): Promise<BrowserContext> {
  const key = options.clock ? `${token}+clock` : token;
  let context = contexts.get(key);
  if (!context) {
    context = await browser.newContext({ viewport: VIEWPORTS.desktop, locale: "en-US", timezoneId: "UTC" });
    context.setDefaultTimeout(15_000);
    if (token) await context.addInitScript(([k, v]) => sessionStorage.setItem(k, v), [TOKEN_KEY, token] as const);
    // Fake timers: a test runs the page's 2 s refresh forward (clock.runFor) instead of waiting for it.
    if (options.clock) await context.clock.install();
    contexts.set(key, context);
  }
  return context;
}

/** A new tab at `hash` of the dashboard, signed in with `token` (none: the sign-in form). */
async function open(hash: string, token?: string, options: { clock?: boolean } = {}): Promise<Page> {
  const page = await (await contextFor(token, options)).newPage();
  pages.push(page);
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("console", (msg) => {
    if (/content security policy/i.test(msg.text())) problems.push(`console: ${msg.text()}`);
  });
  await page.goto(dashboard + hash);
  return page;
}

/** Shows `hash` in the open tab (no reload) and waits for its section `testid` to be ready. */
async function go(page: Page, hash: string, testid: string): Promise<void> {
  await page.evaluate((h) => (location.hash = h), hash);
  await ready(page, testid);
}

/** Waits until the page section `testid` has finished its first refresh. */
async function ready(page: Page, testid: string): Promise<void> {
  await page.locator(`section[data-testid="${testid}"][data-ready]`).waitFor();
}

/** The text of the first element matching `selector` now (null when there is none): for polling. */
function textOf(page: Page, selector: string): Promise<string | null> {
  return page.evaluate((sel) => document.querySelector(sel)?.textContent ?? null, selector);
}

/** The value shown on the queue page's stats card `label`. */
const card = (page: Page, label: string) => textOf(page, `[data-testid=queue-stats] [data-stat="${label}"] strong`);

async function reliableQueue(name: string, maxDeliveries = 0): Promise<void> {
  await sy.client.createQueue({ name, mode: QueueMode.RELIABLE, maxDeliveries });
}

/** Leases the queue's only item and retries it (with `reason`) until it is dead-lettered; returns the deliveries it took. */
async function deadLetter(queue: string, id: string, reason?: string): Promise<number> {
  const session = sy.client.lease(queue, 1);
  try {
    for (let delivery = 1; delivery <= 10; delivery++) {
      const d = await session.next();
      expect(d?.id).toBe(id);
      expect(d?.deliveryCount).toBe(delivery);
      if ((await sy.client.retry(d!.leaseToken, { reason, delayMs: 0 })).deadLettered) return delivery;
    }
    throw new Error(`${id} was not dead-lettered after 10 deliveries`);
  } finally {
    await session.close();
  }
}

/** A job that ran once (HelloWorld) and has its log entry. */
async function jobThatRan(name: string): Promise<string> {
  const job = await sy.client.createJob({ name, target: "HelloWorld", schedule: "0 30 2 * * *", timeZone: "Europe/Berlin" });
  const runId = await sy.client.runOnce(job.id);
  await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.some((l) => l.id === runId), SEEN).toBe(true);
  return job.id;
}

describe("dashboard", () => {
  it("asks for a token, refuses the API without one, shows the caller once signed in, and signs out cleanly", async () => {
    const page = await open("#/queues", undefined, { clock: true });
    await page.locator("[data-testid=signin]").waitFor();
    expect(await page.locator("[data-testid=caller]").count()).toBe(0);

    const res = await fetch(`${http}/api/switchyard.v1.QueueService/ListQueues`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { code: string }).code).toBe("unauthenticated");

    await page.locator("[data-testid=token-input]").fill("not-a-token");
    await page.locator("[data-testid=signin] button[type=submit]").click();
    await page.locator("[data-testid=signin] [role=alert]", { hasText: "That token was not accepted." }).waitFor();

    await page.locator("[data-testid=token-input]").fill(ADMIN);
    await page.locator("[data-testid=signin] button[type=submit]").click();
    await page.locator("[data-testid=caller]", { hasText: "admin" }).waitFor();
    await ready(page, "queues-page");
    expect(await page.locator("[data-testid=signin]").count()).toBe(0);
    expect(await page.locator("[data-testid=read-only]").count()).toBe(0);

    // Signed out, the form stays as it is: no refresh behind it redraws it and loses what is typed.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.locator("[data-testid=signin]").waitFor();
    await page.evaluate(() => ((document.querySelector("[data-testid=signin]") as unknown as { __first: boolean }).__first = true));
    await page.locator("[data-testid=token-input]").fill(VIEWER.slice(0, 6));
    await page.clock.runFor(4_100); // two of the page's 2 s refresh ticks
    // One API round trip after those ticks, so what a refresh started then would have come back.
    expect(await page.evaluate(() => fetch("/api/switchyard.v1.AuthService/GetCaller", {
      method: "POST", headers: { "content-type": "application/json" }, body: "{}",
    }).then((r) => r.status))).toBe(401);
    expect(await page.evaluate(() => ({
      sameForm: (document.querySelector("[data-testid=signin]") as unknown as { __first?: boolean } | null)?.__first ?? false,
      typed: document.querySelector<HTMLInputElement>("[data-testid=token-input]")?.value,
      alert: document.querySelector("[data-testid=signin] [role=alert]")?.textContent ?? null,
    }))).toEqual({ sameForm: true, typed: VIEWER.slice(0, 6), alert: null });

    await page.locator("[data-testid=token-input]").fill(VIEWER);
    await page.locator("[data-testid=signin] button[type=submit]").click();
    await page.locator("[data-testid=caller]", { hasText: "viewer" }).waitFor();
    await page.locator("[data-testid=read-only]").waitFor();
  });

  it("shows a queue's ready count and follows new items without a reload", async () => {
    await reliableQueue("{orders}");
    await sy.client.enqueue("{orders}", ["a", "b", "c"]);
    const page = await open("#/queues", ADMIN);
    await ready(page, "queues-page");
    const cell = (name: string) => textOf(page, `[data-testid=queues] tr[data-queue="{orders}"] td[data-testid=${name}]`);
    await expect.poll(() => cell("ready"), SEEN).toBe("3");
    expect(await cell("processing")).toBe("0");
    expect(await cell("dead")).toBe("0");

    await page.evaluate(() => ((window as unknown as { __sameDocument: boolean }).__sameDocument = true));
    await sy.client.enqueue("{orders}", ["d", "e"]);
    await expect.poll(() => cell("ready"), SEEN).toBe("5");
    // Still the same document: the count came from the page's own refresh.
    expect(await page.evaluate(() => (window as unknown as { __sameDocument?: boolean }).__sameDocument)).toBe(true);
  });

  it("shows a stream queue's consumer groups: pending, lag and consumers", async () => {
    await sy.client.createQueue({ name: "{clicks}", mode: QueueMode.STREAM, groups: [{ name: "counter" }, { name: "archiver", startId: "0" }] });
    await sy.client.enqueue("{clicks}", ["a", "b", "c"]);
    const lease = sy.client.lease("{clicks}", 1, { group: "counter" });
    await lease.take(1);
    try {
      const page = await open(`#/queues/${encodeURIComponent("{clicks}")}`, ADMIN);
      await ready(page, "queue-page");
      expect(await card(page, "mode")).toBe("stream");
      const cells = (group: string) => page.evaluate((g) => Array.from(document.querySelectorAll(`[data-testid=groups] tr[data-group="${g}"] td`)).map((td) => td.textContent), group);
      await expect.poll(() => cells("counter"), SEEN).toEqual(["counter", "1", "2", expect.any(String), "1", expect.stringMatching(/^\d+-\d+$/)]);
      expect(await cells("archiver")).toEqual(["archiver", "0", "3", "—", "0", "0-0"]);
    } finally {
      await lease.close();
    }
  });

  it("shows a payload holding markup as text and runs none of it", async () => {
    await reliableQueue("{xss}");
    const [id] = await sy.client.enqueue("{xss}", [XSS]);
    const page = await open(`#/queues/${encodeURIComponent("{xss}")}`, ADMIN);
    await ready(page, "queue-page");
    const payload = page.locator(`[data-testid=ready-items] tr[data-item="${id}"] td[data-testid=payload]`);
    await payload.waitFor();
    expect(await payload.textContent()).toBe(XSS);
    expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
    expect(await page.locator("[data-testid=ready-items] script, [data-testid=ready-items] img").count()).toBe(0);
    expect(await page.locator("main script, main img").count()).toBe(0);
  });

  it("requeues a dead letter from the page, and a worker then acks the same item", async () => {
    await reliableQueue("{poison}", 2);
    const [id] = await sy.client.enqueue("{poison}", ["poison pill"]);
    expect(await deadLetter("{poison}", id)).toBe(2);
    expect(await sy.client.getQueueStats("{poison}")).toMatchObject({ ready: 0n, processing: 0n, deadLetter: 1n });

    const page = await open(`#/queues/${encodeURIComponent("{poison}")}`, ADMIN);
    await ready(page, "queue-page");
    const row = page.locator(`[data-testid=dead-items] tr[data-item="${id}"]`);
    await row.waitFor();
    expect(await row.locator("td[data-testid=payload]").textContent()).toBe("poison pill");
    expect(await card(page, "dead letters")).toBe("1");

    await row.locator("[data-testid=requeue]").click();
    await page.locator("[data-testid=notice]", { hasText: "Requeued 1 dead letters." }).waitFor();
    await expect.poll(() => card(page, "dead letters"), SEEN).toBe("0");
    await expect.poll(() => card(page, "ready"), SEEN).toBe("1");
    await page.locator(`[data-testid=ready-items] tr[data-item="${id}"]`).waitFor();
    await row.waitFor({ state: "detached" });

    const session = sy.client.lease("{poison}", 1);
    try {
      const d = await session.next();
      expect(d?.id).toBe(id);
      await sy.client.ack(d!.leaseToken);
    } finally {
      await session.close();
    }
    expect(await sy.client.getQueueStats("{poison}")).toMatchObject({ ready: 0n, processing: 0n, deadLetter: 0n });
    await expect.poll(() => card(page, "ready"), SEEN).toBe("0");
  });

  it("pauses and resumes deliveries from the page, and shows why retries and dead letters failed", async () => {
    await reliableQueue("{hold}", 2);
    const [deadId] = await sy.client.enqueue("{hold}", ["bad input"]);
    expect(await deadLetter("{hold}", deadId, "cannot parse <b>bad input</b>")).toBe(2);
    const [retriedId, waitingId] = await sy.client.enqueue("{hold}", ["flaky", "rate limited"]);
    const session = sy.client.lease("{hold}", 2);
    try {
      const [flaky, limited] = await session.take(2);
      expect([flaky.id, limited.id]).toEqual([retriedId, waitingId]);
      session.setCredit(0);
      expect((await sy.client.retry(flaky.leaseToken, { reason: "timeout talking to S3", delayMs: 0 })).deadLettered).toBe(false);
      expect((await sy.client.retry(limited.leaseToken, { reason: "429 from upstream", delayMs: 60_000 })).notBefore).toBeDefined();
    } finally {
      await session.close();
    }

    const page = await open(`#/queues/${encodeURIComponent("{hold}")}`, ADMIN);
    await ready(page, "queue-page");
    const deadRow = page.locator(`[data-testid=dead-items] tr[data-item="${deadId}"]`);
    await deadRow.waitFor();
    expect(await deadRow.locator("[data-testid=last-error]").textContent()).toBe("cannot parse <b>bad input</b>");
    const readyRow = page.locator(`[data-testid=ready-items] tr[data-item="${retriedId}"]`);
    await readyRow.waitFor();
    expect(await readyRow.locator("[data-testid=last-error]").textContent()).toBe("timeout talking to S3");
    const waitingRow = page.locator(`[data-testid=delayed-items] tr[data-item="${waitingId}"]`);
    await waitingRow.waitFor();
    expect(await waitingRow.locator("[data-testid=last-error]").textContent()).toBe("429 from upstream");
    expect(await waitingRow.locator("[data-testid=not-before]").textContent()).not.toBe("—");
    expect(await card(page, "delayed")).toBe("1");
    expect(await card(page, "deliveries")).toBe("running");

    await page.locator("[data-testid=pause-queue]").click();
    await page.locator("[data-testid=notice]", { hasText: "Paused deliveries of {hold}; enqueues still land." }).waitFor();
    await expect.poll(() => card(page, "deliveries"), SEEN).toBe("paused");
    expect((await sy.client.getQueue("{hold}")).paused).toBe(true);
    const list = await open("#/queues", ADMIN);
    await ready(list, "queues-page");
    expect(await list.locator(`tr[data-queue="{hold}"] [data-testid=paused]`).textContent()).toBe("paused");

    await page.locator("[data-testid=resume-queue]").click();
    await page.locator("[data-testid=notice]", { hasText: "Resumed deliveries of {hold}." }).waitFor();
    await expect.poll(() => card(page, "deliveries"), SEEN).toBe("running");
    expect((await sy.client.getQueue("{hold}")).paused).toBe(false);
  });

  it("purges only after confirmation, and leaves leased items alone", async () => {
    await reliableQueue("{purge-me}");
    await sy.client.enqueue("{purge-me}", ["1", "2", "3", "4"]);
    const session = sy.client.lease("{purge-me}", 1);
    try {
      const leased = await session.next();
      expect(leased).toBeDefined();
      const page = await open(`#/queues/${encodeURIComponent("{purge-me}")}`, ADMIN);
      await ready(page, "queue-page");
      await expect.poll(() => card(page, "ready"), SEEN).toBe("3");
      expect(await card(page, "processing")).toBe("1");

      await page.locator("[data-testid=purge]").click();
      const confirm = page.locator("[data-testid=confirm-purge]");
      await confirm.waitFor();
      expect(await confirm.textContent()).toContain("Delete the 3 items waiting in {purge-me}?");
      await page.locator("[data-testid=confirm-purge-no]").click();
      await confirm.waitFor({ state: "detached" });
      expect((await sy.client.getQueueStats("{purge-me}")).ready).toBe(3n);

      await page.locator("[data-testid=purge]").click();
      await page.locator("[data-testid=confirm-purge-yes]").click();
      await page.locator("[data-testid=notice]", { hasText: "Purged 3 items from {purge-me}." }).waitFor();
      await expect.poll(() => card(page, "ready"), SEEN).toBe("0");
      expect(await card(page, "processing")).toBe("1");
      expect(await sy.client.getQueueStats("{purge-me}")).toMatchObject({ ready: 0n, processing: 1n });
      await sy.client.ack(leased!.leaseToken);
    } finally {
      await session.close();
    }
  });

  it("creates a cron job with a live schedule preview, runs it once and shows the result", async () => {
    const page = await open("#/cron", ADMIN);
    await ready(page, "cron-page");
    await page.locator("[data-testid=new-job]").click();
    await ready(page, "job-editor");
    await page.locator("[data-testid=field-name]").fill("dash-hello");
    await page.locator("[data-testid=field-target]").fill("HelloWorld");

    // Each invalid schedule shows the server's own explanation, before anything is saved.
    for (const bad of ["61 * * * * *", "nonsense"]) {
      const why = await sy.client.previewSchedule(bad, "UTC", 5).then(
        () => { throw new Error(`${bad} was accepted`); },
        (err: { code: number; details: string }) => err,
      );
      expect(why.code).toBe(3); // INVALID_ARGUMENT
      await page.locator("[data-testid=field-schedule]").fill(bad);
      await page.locator("[data-testid=preview-error]", { hasText: why.details }).waitFor();
      expect(await page.locator("[data-testid=preview-error]").textContent()).toBe(`InvalidArgument: ${why.details}`);
    }
    expect((await sy.client.listJobs()).jobs.some((j) => j.name === "dash-hello")).toBe(false);

    await page.locator("[data-testid=field-schedule]").fill("0 */5 * * * *");
    await page.locator("[data-testid=field-time_zone]").fill("Europe/Berlin");
    await page.locator("[data-testid=preview]", { hasText: "Next fire times (Europe/Berlin)" }).waitFor();
    const times = page.locator("[data-testid=preview-times] li");
    await expect.poll(() => times.count(), SEEN).toBe(5);
    for (const t of await times.allTextContents()) expect(t).toMatch(/\b\d{2}:[0-5][05]:00\b/);

    await page.locator("[data-testid=save]").click();
    await page.waitForFunction(() => /^#\/cron\/[^/]+$/.test(location.hash) && location.hash !== "#/cron/new");
    const id = decodeURIComponent((await page.evaluate(() => location.hash)).split("/")[2]);
    await ready(page, "job-page");
    expect(await page.locator("[data-testid=next-fires] li").count()).toBe(5);
    const job = await sy.client.getJob(id);
    expect(job).toMatchObject({ name: "dash-hello", target: "HelloWorld", schedule: "0 */5 * * * *", timeZone: "Europe/Berlin" });

    // RunOnce runs at once, detached, without waiting for the (manual) clock.
    await page.locator("[data-testid=run-once]").click();
    const started = await page.locator("[data-testid=notice]", { hasText: "Started a run of dash-hello" }).textContent();
    const runId = /\(log (.+)\)\.$/.exec(started ?? "")?.[1];
    expect(runId, started ?? "").toBeTruthy();
    const entry = page.locator(`[data-testid=job-log] tr[data-log="${runId}"]`);
    await entry.locator(".badge.succeeded").waitFor(SEEN);
    expect(await entry.textContent()).toContain("run once");
    expect(await entry.textContent()).toContain("hello world");
    expect(await entry.textContent()).toContain(sy.app.scheduler.instanceId);

    await page.locator("[data-testid=job-page] .crumbs a").click();
    await ready(page, "cron-page");
    await page.locator(`[data-testid=jobs] tr[data-job="${id}"] .badge.succeeded`).waitFor(SEEN);
  });

  it("shows a read-only caller the data with every write control disabled", async () => {
    await reliableQueue("{watched}", 1);
    const [id] = await sy.client.enqueue("{watched}", ["dead on arrival"]);
    await deadLetter("{watched}", id);
    await sy.client.enqueue("{watched}", ["x", "y"]);
    const job = await sy.client.createJob({ name: "watched-job", target: "HelloWorld", schedule: "0 0 4 * * *" });
    expect((await sy.client.resumeJob(job.id)).status).toBe(JobStatus.RUNNING);

    const page = await open(`#/queues/${encodeURIComponent("{watched}")}`, VIEWER);
    await page.locator("[data-testid=read-only]").waitFor();
    expect(await page.locator("[data-testid=caller]").textContent()).toBe("viewer");
    await ready(page, "queue-page");
    await expect.poll(() => card(page, "ready"), SEEN).toBe("2");
    expect(await card(page, "dead letters")).toBe("1");
    await page.locator(`[data-testid=dead-items] tr[data-item="${id}"]`).waitFor();
    for (const testid of ["purge", "pause-queue", "requeue", "delete", "requeue-all", "delete-all"]) {
      const button = page.locator(`[data-testid=${testid}]`);
      expect(await button.isDisabled(), testid).toBe(true);
      expect(await button.getAttribute("title"), testid).toContain("needs scope queue:admin:{watched}");
    }

    await go(page, "#/cron", "cron-page");
    const row = page.locator(`[data-testid=jobs] tr[data-job="${job.id}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain("watched-job");
    expect(await page.locator("[data-testid=new-job]").isDisabled()).toBe(true);
    for (const testid of ["run-once", "pause", "edit"]) expect(await row.locator(`[data-testid=${testid}]`).isDisabled(), testid).toBe(true);
  });

  it("lists this instance on the scheduler page with its mounted count", async () => {
    const page = await open("#/scheduler", ADMIN);
    await ready(page, "scheduler-page");
    const { instanceId } = sy.app.scheduler;
    const row = page.locator(`[data-testid=instances] tr[data-instance="${instanceId}"]`);
    await row.waitFor();
    const status = (await sy.client.getSchedulerStatus()).instances.find((i) => i.instanceId === instanceId);
    expect(status).toBeDefined();
    const cells = await row.locator("td").allTextContents();
    expect(cells[0]).toBe(instanceId);
    expect(cells[3]).toBe(String(status!.mountedCount));
  });

  it("serves the page with a strict CSP, revalidated index.html, immutable assets and a redirect from /", async () => {
    const index = await fetch(dashboard);
    expect(index.status).toBe(200);
    const csp = index.headers.get("content-security-policy") ?? "";
    expect(csp.split(";").map((d) => d.trim())).toContain("script-src 'self'");
    expect(csp).not.toContain("unsafe-inline");
    expect(csp).not.toContain("unsafe-eval");
    expect(index.headers.get("cache-control")).toBe("no-cache");
    const etag = index.headers.get("etag");
    expect(etag).toBeTruthy();
    const html = await index.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script to allow

    const again = await fetch(dashboard, { headers: { "if-none-match": etag! } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe("");

    const assets = [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((m) => m[1]);
    expect(assets.some((a) => a.endsWith(".js"))).toBe(true);
    expect(assets.some((a) => a.endsWith(".css"))).toBe(true);
    for (const path of assets) {
      const res = await fetch(http + path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("cache-control"), path).toContain("immutable");
      expect(res.headers.get("content-security-policy"), path).toBe(csp);
      await res.arrayBuffer();
    }
    // A route of the page itself (deep link) gets index.html; an unknown asset does not.
    expect((await fetch(`${dashboard}queues/x`)).headers.get("content-type")).toContain("text/html");
    expect((await fetch(`${dashboard}assets/missing.js`)).status).toBe(404);

    for (const path of ["/", "/dashboard"]) {
      const res = await fetch(http + path, { redirect: "manual" });
      expect(res.status, path).toBe(302);
      expect(res.headers.get("location"), path).toBe("/dashboard/");
    }
  });

  it("renders every page at desktop and phone width without the page overflowing sideways", async () => {
    await reliableQueue("{thumbnails.resize}", 1);
    const ids: string[] = [];
    for (const item of [
      { payload: '{"image":"s3://bucket/cat.jpg","width":640}', headers: { "trace-id": "4bf92f3577b34da6" } },
      { payload: '{"image":"s3://bucket/dog-with-a-very-long-name-that-has-to-wrap-somewhere.jpg","width":1280}' },
    ]) {
      const [id] = await sy.client.enqueue("{thumbnails.resize}", [item]);
      await deadLetter("{thumbnails.resize}", id);
      ids.push(id);
    }
    await sy.client.enqueue("{thumbnails.resize}", ['{"image":"s3://bucket/bird.jpg","width":320}']);
    const jobId = await jobThatRan("nightly-report");

    const shots: { name: string; hash: string; section: string; then?: (page: Page) => Promise<void> }[] = [
      { name: "queues", hash: "#/queues", section: "queues-page" },
      {
        name: "queue", hash: `#/queues/${encodeURIComponent("{thumbnails.resize}")}`, section: "queue-page",
        then: async (page) => void (await page.locator(`[data-testid=dead-items] tr[data-item="${ids[1]}"]`).waitFor()),
      },
      { name: "cron", hash: "#/cron", section: "cron-page" },
      {
        name: "job", hash: `#/cron/${jobId}`, section: "job-page",
        then: async (page) => void (await page.locator("[data-testid=job-log] .badge.succeeded").waitFor()),
      },
      {
        name: "job-editor", hash: "#/cron/new", section: "job-editor",
        then: async (page) => {
          await page.locator("[data-testid=field-name]").fill("hourly-cleanup");
          await page.locator("[data-testid=field-target]").fill("LogClean");
          await page.locator("[data-testid=field-schedule]").fill("# 0 * * * 1-5");
          await page.locator("[data-testid=field-time_zone]").fill("America/New_York");
          await page.locator("[data-testid=preview]", { hasText: "America/New_York" }).waitFor();
          await page.locator("[data-testid=preview-times] li").nth(4).waitFor();
        },
      },
      { name: "scheduler", hash: "#/scheduler", section: "scheduler-page" },
    ];

    /** Saves the tab at each viewport as <name>-<viewport>.png; at phone width nothing but a table may scroll sideways. */
    const shoot = async (page: Page, name: string) => {
      for (const [size, viewport] of Object.entries(VIEWPORTS)) {
        await page.setViewportSize(viewport);
        const file = await screenshot(page, `${name}-${size}`);
        const png = readFileSync(file);
        expect(png.length, file).toBeGreaterThan(1000);
        expect(png.subarray(0, 8).toString("hex"), file).toBe("89504e470d0a1a0a");
        if (size === "phone") {
          const widths = await page.evaluate(() => ({
            viewport: window.innerWidth,
            document: document.documentElement.scrollWidth,
            body: document.body.scrollWidth,
          }));
          expect(widths.document, `${name}: the document is wider than the phone`).toBeLessThanOrEqual(widths.viewport);
          expect(widths.body, `${name}: the body is wider than the phone`).toBeLessThanOrEqual(widths.viewport);
        }
      }
      await page.setViewportSize(VIEWPORTS.desktop);
    };

    const page = await open(shots[0].hash, ADMIN);
    for (const shot of shots) {
      await go(page, shot.hash, shot.section);
      await shot.then?.(page);
      await shoot(page, shot.name);
    }
    const signin = await open("");
    await signin.locator("[data-testid=signin]").waitFor();
    await shoot(signin, "signin");
  });
});
