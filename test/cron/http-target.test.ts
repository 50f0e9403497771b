/** HTTP targets (SPEC C7, seed 001 §2): GET/POST, status handling, the 1000-character excerpt, the 30 s timeout. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobRunStatus, JobTrigger, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import type { ManualClock } from "../../src/clock.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

/** What the local server answers on each path; a route that never answers keeps the response here. */
type Route = (req: Recorded, res: ServerResponse) => void;

/** Every port of 127.0.0.1: the tests' own server, and a closed port for the refused connection. */
const LOOPBACK = "127.0.0.1";

let redis: TestRedis;
let sy: TestSwitchyard;
let clock: ManualClock;
let server: Server;
let base: string;
const requests: Recorded[] = [];
const hanging: ServerResponse[] = [];
const routes: Record<string, Route> = {
  "/ok": (_req, res) => res.writeHead(200, { "content-type": "text/plain" }).end("all good: 42 rows"),
  "/echo": (req, res) => res.writeHead(200).end(`got ${req.body}`),
  "/boom": (_req, res) => res.writeHead(500).end(BIG_BODY),
  "/emoji": (_req, res) => res.writeHead(500).end(EMOJI_BODY),
  "/created": (_req, res) => res.writeHead(201).end("created"),
  "/never": (_req, res) => void hanging.push(res),
};

// 1000 two-byte characters, then 4000 ASCII ones: the excerpt is counted in characters, not bytes.
const BIG_BODY = "é".repeat(1000) + "x".repeat(4000);
// 1500 characters outside the BMP (two UTF-16 units each): the excerpt counts characters, not units.
const EMOJI_BODY = "\u{1F600}".repeat(1500);

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const recorded = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks).toString("utf8") };
      requests.push(recorded);
      (routes[new URL(recorded.url, "http://x").pathname] ?? ((_r, s) => s.writeHead(404).end("no route")))(recorded, res);
    });
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  redis = await startRedis();
  // The local server is on loopback, which the SSRF guard refuses unless allowed (test/cron/ssrf.test.ts).
  sy = await startSwitchyard(redis, { env: { SWITCHYARD_HTTP_ALLOW: LOOPBACK } });
  clock = sy.clock as ManualClock;
});
afterAll(async () => {
  for (const res of hanging) res.destroy();
  server.closeAllConnections();
  await new Promise<void>((ok) => server.close(() => ok()));
  await sy.stop();
  await redis.stop();
});

async function httpJob(target: string, params = ""): Promise<string> {
  const job = await sy.client.createJob({ name: `http ${target}`, target, params, schedule: "0 0 3 * * *" });
  return job.id;
}

/** Runs the job once and waits (by polling, with a deadline) for its log entry. */
async function runAndWait(jobId: string): Promise<JobLog> {
  const runId = await sy.client.runOnce(jobId);
  await expect.poll(async () => (await sy.client.listJobLogs(jobId)).logs.map((l) => l.id), { timeout: 10_000 }).toContain(runId);
  const entry = (await sy.client.listJobLogs(jobId)).logs.find((l) => l.id === runId)!;
  expect(entry.trigger).toBe(JobTrigger.RUN_ONCE);
  return entry;
}

const requestsTo = (path: string) => requests.filter((r) => new URL(r.url, "http://x").pathname === path);

describe("HTTP targets", () => {
  it("calls a target without params with GET and no body, and logs SUCCEEDED with the response body", async () => {
    const id = await httpJob(`${base}/ok?src=cron`);
    const entry = await runAndWait(id);
    const [req] = requestsTo("/ok");
    expect(requestsTo("/ok")).toHaveLength(1);
    expect(req.method).toBe("GET");
    expect(req.url).toBe("/ok?src=cron");
    expect(req.body).toBe("");
    expect(req.headers["content-type"]).toBeUndefined();
    expect(req.headers["content-length"] ?? "0").toBe("0");
    expect(req.headers["transfer-encoding"]).toBeUndefined();
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toContain("all good: 42 rows");
    expect(entry.error).toBe("");
  });

  it("POSTs params as application/json, byte for byte", async () => {
    const id = await httpJob(`${base}/echo`, '{"a":1}');
    const entry = await runAndWait(id);
    const sent = requestsTo("/echo");
    expect(sent).toHaveLength(1);
    expect(sent[0].method).toBe("POST");
    expect(sent[0].headers["content-type"]).toBe("application/json");
    expect(sent[0].body).toBe('{"a":1}');
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toContain('got {"a":1}');
  });

  it("fails a 500 and records the status and exactly the first 1000 characters of the body", async () => {
    const id = await httpJob(`${base}/boom`);
    const entry = await runAndWait(id);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("500");
    expect(entry.error).toContain(BIG_BODY.slice(0, 1000));
    expect(entry.error).not.toContain(BIG_BODY.slice(0, 1001));
    expect(entry.message).toBe("");
  });

  it("keeps the first 1000 characters of a body outside the BMP, not 500 (issue 12, defect 13)", async () => {
    const entry = await runAndWait(await httpJob(`${base}/emoji`));
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toBe(`HTTP 500: ${"\u{1F600}".repeat(1000)}`);
  });

  it("fails any status but 200, even another 2xx", async () => {
    const entry = await runAndWait(await httpJob(`${base}/created`));
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("201");
    expect(entry.error).toContain("created");
  });

  it("keeps a run against a silent server pending until the 30 s timeout, then fails it as timed out", async () => {
    const id = await httpJob(`${base}/never`);
    const runId = await sy.client.runOnce(id);
    await expect.poll(() => requestsTo("/never").length).toBe(1);

    await clock.advance(29_999);
    // Let any (wrongly) early failure reach the log before looking.
    await sy.client.getJob(id);
    expect((await sy.client.listJobLogs(id)).logs).toEqual([]);

    await clock.advance(1);
    await expect.poll(async () => (await sy.client.listJobLogs(id)).logs.length, { timeout: 10_000 }).toBe(1);
    const [entry] = (await sy.client.listJobLogs(id)).logs;
    expect(entry.id).toBe(runId);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("timed out");
    expect(Number(entry.duration?.seconds)).toBe(30);
  });

  it("honours SWITCHYARD_HTTP_TIMEOUT", async () => {
    const other = await startSwitchyard(redis, { env: { SWITCHYARD_HTTP_TIMEOUT: "5s", SWITCHYARD_HTTP_ALLOW: LOOPBACK } });
    try {
      const job = await other.client.createJob({ name: "short timeout", target: `${base}/never`, schedule: "0 0 3 * * *" });
      await other.client.runOnce(job.id);
      await expect.poll(() => requestsTo("/never").length).toBe(2);
      await (other.clock as ManualClock).advance(4_999);
      await other.client.getJob(job.id);
      expect((await other.client.listJobLogs(job.id)).logs).toEqual([]);
      await (other.clock as ManualClock).advance(1);
      await expect.poll(async () => (await other.client.listJobLogs(job.id)).logs.length, { timeout: 10_000 }).toBe(1);
      const [entry] = (await other.client.listJobLogs(job.id)).logs;
      expect(entry.status).toBe(JobRunStatus.FAILED);
      expect(entry.error).toContain("timed out");
    } finally {
      await other.stop();
    }
  });

  it("fails a run whose connection is refused", async () => {
    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, "127.0.0.1", ok));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((ok) => closed.close(() => ok()));

    const entry = await runAndWait(await httpJob(`http://127.0.0.1:${port}/gone`, '{"a":1}'));
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toMatch(/ECONNREFUSED|refused/i);
    expect(entry.message).toBe("");
  });
});
