/**
 * The `switchyard` command line, as a user runs it: `switchyard serve` in a
 * child process on a private Redis, then every step of a tour as its own
 * process (declare, enqueue, stats, peek-dead, cron create → run → logs), with
 * the Python worker (examples/python/worker.py) leasing in between. Each step's
 * table and --json output is checked. Runs the build in dist/ (npm test builds).
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { get, key, scrape } from "../helpers/http.js";
import { preparePython, type PythonWorker } from "../helpers/python.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const CLI = join(root, "dist/cli/main.js");
const PRELOAD = join(root, "test/fixtures/otel-preload.mjs");
const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

let redis: TestRedis;
let python: PythonWorker | undefined;
let pythonProblem: Error | undefined;
const children: ChildProcess[] = [];

/** A running `switchyard serve` and the addresses it printed. */
interface Served {
  child: ChildProcess;
  grpc: string;
  http: string;
  stderr: () => string;
}

/** Starts `switchyard serve` with `env` on top of the test Redis; resolves once it printed both addresses. */
function serve(env: Record<string, string> = {}): Promise<Served> {
  const child = spawn(process.execPath, [CLI, "serve"], {
    env: {
      ...process.env,
      ...redis.env,
      SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
      SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0",
      SWITCHYARD_LOG_LEVEL: "warn",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((ok, fail) => {
    let grpc = "";
    const timer = setTimeout(() => fail(new Error(`serve printed no addresses within 20 s; stderr:\n${stderr}`)), 20_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      grpc ||= /^switchyard listening on (\S+)$/.exec(line)?.[1] ?? "";
      const http = /^switchyard metrics on http:\/\/(\S+)\/metrics$/.exec(line)?.[1];
      if (grpc && http) {
        clearTimeout(timer);
        ok({ child, grpc, http, stderr: () => stderr });
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`serve exited with ${code}; stderr:\n${stderr}`));
    });
  });
}

/** Ends a served child with SIGTERM; resolves to how it exited ("code 0" for a clean stop). */
function terminate(s: Served): Promise<string> {
  const exited = new Promise<string>((ok) => s.child.once("exit", (code, signal) => ok(code === null ? `signal ${signal}` : `code ${code}`)));
  s.child.kill("SIGTERM");
  return exited;
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `switchyard ...args` against `address` (through SWITCHYARD_ADDRESS); never rejects. */
function sy(address: string, args: string[], stdin?: string): Promise<Run> {
  return new Promise((ok) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...process.env, SWITCHYARD_ADDRESS: address }, timeout: 20_000 },
      (err, stdout, stderr) => ok({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.end(stdin ?? "");
  });
}

/** Runs a step that must succeed; returns its stdout. */
async function ok(address: string, args: string[], stdin?: string): Promise<string> {
  const r = await sy(address, args, stdin);
  if (r.code !== 0) throw new Error(`switchyard ${args.join(" ")} exited ${r.code}:\n${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Rows of a printed table, cells split on runs of two or more spaces. */
const rows = (table: string) => table.trimEnd().split("\n").map((l) => l.split(/\s{2,}/));

beforeAll(async () => {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build first (npm test does)`);
  redis = await startRedis();
  python = await preparePython().catch((err: Error) => {
    pythonProblem = err;
    return undefined;
  });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  python?.cleanup();
  await redis?.stop();
});

describe("switchyard CLI", () => {
  it("drives a full tour: declare, enqueue, lease with the Python worker, stats, peek-dead, cron create → run → logs", { timeout: 180_000 }, async () => {
    if (pythonProblem) throw pythonProblem;
    const server = await serve();
    const a = server.grpc;
    const q = "{tour}";

    // declare: a reliable queue whose items dead-letter on their first retry.
    const declared = await ok(a, ["queue", "declare", q, "--mode", "reliable", "--max-deliveries", "1"]);
    expect(declared).toContain(`declared queue ${q}\n`);
    expect(declared).toMatch(/^mode: +reliable$/m);
    expect(declared).toMatch(/^max deliveries: +1$/m);
    const again = JSON.parse(await ok(a, ["queue", "declare", q, "--mode", "reliable", "--max-deliveries", "1", "--json"]));
    expect(again.queue).toMatchObject({ name: q, mode: "QUEUE_MODE_RELIABLE", maxDeliveries: 1, deadLetterList: `${q}.dead` });

    const listed = rows(await ok(a, ["queue", "list"]));
    expect(listed[0]).toEqual(["NAME", "MODE", "MAX-DELIVERIES", "RECOVERY-SET", "MIN-IDLE", "CREATED"]);
    expect(listed.slice(1).map((r) => r.slice(0, 5))).toEqual([[q, "reliable", "1", "-", "-"]]);
    expect(JSON.parse(await ok(a, ["queue", "list", "--json"])).queues.map((x: { name: string }) => x.name)).toEqual([q]);

    // enqueue: three payloads as arguments with a header and a traceparent, one more from stdin.
    const enq = (await ok(a, ["queue", "enqueue", q, "one", "two", "three", "-H", "origin=cli", "--traceparent", TRACEPARENT])).trimEnd().split("\n");
    expect(enq[0]).toBe(`enqueued 3 items onto ${q}`);
    const ids = enq.slice(1);
    expect(ids).toHaveLength(3);

    // lease: the Python worker takes the three and acks them; then a fourth, and retries it into the dead letters.
    // (The fourth is enqueued after the first worker is done: its credit-0 message and its unary acks travel
    // on different HTTP/2 streams, so an ack may free credit first and lease the fourth to it for a moment.)
    const worked = JSON.parse(await python!.run(["--address", a, "--queue", q, "--work", "3", "--settle", "ack", "--timeout", "15"]));
    expect(worked.deliveries.map((d: { id: string }) => d.id)).toEqual(ids);
    expect(worked.deliveries.map((d: { payload: string }) => d.payload)).toEqual(["one", "two", "three"]);
    for (const d of worked.deliveries) expect(d.headers).toEqual({ origin: "cli", traceparent: TRACEPARENT });
    const fromStdin = JSON.parse(await ok(a, ["queue", "enqueue", q, "-", "--json"], "four\n"));
    expect(fromStdin).toEqual({ queue: q, ids: [expect.any(String)] });
    const retried = JSON.parse(await python!.run(["--address", a, "--queue", q, "--work", "1", "--settle", "retry", "--timeout", "15"]));
    expect(retried.deliveries).toEqual([expect.objectContaining({ id: fromStdin.ids[0], payload: "four", dead_lettered: true, delivery_count: 1 })]);

    // stats
    const stats = rows(await ok(a, ["queue", "stats", q]));
    expect(stats).toEqual([
      ["QUEUE", "READY", "PROCESSING", "DEAD-LETTER", "OLDEST-CLAIM", "STREAMS", "DELAYED", "PAUSED"],
      [q, "0", "0", "1", "-", "0", "0", "no"],
    ]);
    expect(JSON.parse(await ok(a, ["queue", "stats", "--json"]))).toEqual({
      // 4 leased; 3 acked complete, the dead-lettered one does not.
      stats: [{ queue: q, ready: "0", processing: "0", deadLetter: "1", leaseStreams: 0, leasedTotal: "4", completedTotal: "3", delayed: "0", paused: false, groups: [] }],
    });

    // peek-dead
    const dead = await ok(a, ["queue", "peek-dead", q]);
    expect(dead.split("\n")[0]).toBe(`1 of 1 dead letter in ${q}`);
    expect(rows(dead.split("\n").slice(1).join("\n"))[1]).toEqual([fromStdin.ids[0], expect.stringMatching(/^\d{4}-/), "-", "-", "four"]);
    const deadJson = JSON.parse(await ok(a, ["queue", "peek-dead", q, "--json"]));
    expect(deadJson.total).toBe("1");
    expect(deadJson.items).toEqual([
      expect.objectContaining({ id: fromStdin.ids[0], payload: Buffer.from("four").toString("base64"), headers: {}, deliveryCount: 1 }),
    ]);

    // cron: create → run → logs, and the controls.
    const created = JSON.parse(await ok(a, ["cron", "create", "--name", "tour job", "--target", "HelloWorld", "--schedule", "@every 1h", "--json"]));
    const id: string = created.job.id;
    expect(created.job).toMatchObject({ name: "tour job", target: "HelloWorld", schedule: "@every 1h", status: "JOB_STATUS_UNPUBLISHED" });
    const run = rows(await ok(a, ["cron", "run", id, "--wait"]));
    expect(run[0]).toEqual(["RUN", "STATUS", "TRIGGER", "STARTED", "DURATION", "FENCE", "MESSAGE"]);
    expect(run[1]).toEqual([expect.stringMatching(new RegExp(`^${id}-\\d+$`)), "succeeded", "run_once", expect.any(String), expect.stringMatching(/s$/), "0", expect.any(String)]);
    const { runId } = JSON.parse(await ok(a, ["cron", "run", id, "--json"]));
    await expect
      .poll(async () => JSON.parse(await ok(a, ["cron", "logs", id, "--json"])).logs.map((l: { id: string }) => l.id), { timeout: 10_000 })
      .toEqual([runId, run[1][0]]);
    const logs = JSON.parse(await ok(a, ["cron", "logs", id, "--json"])).logs;
    expect(logs.map((l: { status: string; trigger: string }) => [l.status, l.trigger])).toEqual([
      ["JOB_RUN_STATUS_SUCCEEDED", "JOB_TRIGGER_RUN_ONCE"],
      ["JOB_RUN_STATUS_SUCCEEDED", "JOB_TRIGGER_RUN_ONCE"],
    ]);
    expect(rows(await ok(a, ["cron", "logs", id, "--limit", "1"])).map((r) => r[0])).toEqual(["RUN", runId]);

    const updated = JSON.parse(await ok(a, ["cron", "update", id, "--schedule", "@every 2h", "--remark", "from the CLI", "--json"]));
    expect(updated.job).toMatchObject({ schedule: "@every 2h", remark: "from the CLI", name: "tour job" });
    expect(await ok(a, ["cron", "resume", id])).toBe(`job ${id} is running\n`);
    expect(await ok(a, ["cron", "pause", id])).toBe(`job ${id} is paused\n`);
    const jobs = rows(await ok(a, ["cron", "list", "--status", "paused"]));
    expect(jobs.slice(1).map((r) => r.slice(0, 6))).toEqual([[id, "tour job", "HelloWorld", "@every 2h", "UTC", "paused"]]);

    // What the service counted for all this.
    const m = await scrape(server.http);
    const item = (event: string) => m.get(key(`switchyard_items_${event}_total`, { queue: q }));
    expect([item("enqueued"), item("leased"), item("acked"), item("dead_lettered")]).toEqual([4, 4, 3, 1]);
    expect((await get(server.http, "/readyz")).status).toBe(200);

    // The dead letter goes back, then the waiting item is purged (only with --yes); a schedule is previewed.
    // Item ids may begin with '-': after --, they are not taken for options.
    expect(await ok(a, ["queue", "requeue-dead", q, "--", fromStdin.ids[0]])).toBe(`requeued 1 dead letter of ${q}\n`);
    const refused = await sy(a, ["queue", "purge", q]);
    expect([refused.code, refused.stderr]).toEqual([2, expect.stringContaining("add --yes")]);
    expect(JSON.parse(await ok(a, ["queue", "purge", q, "--yes", "--json"]))).toEqual({ queue: q, purged: "1" });
    expect(await ok(a, ["queue", "delete-dead", q, "--all"])).toBe(`deleted 0 dead letters of ${q}\n`);
    const fires = JSON.parse(await ok(a, ["cron", "preview", "# 0 9 * * 1-5", "--tz", "Europe/Berlin", "--count", "2", "--json"]));
    expect(fires.schedule).toBe("0 0 9 * * 1-5");
    expect(fires.fireTimes).toHaveLength(2);
    const badSchedule = await sy(a, ["cron", "preview", "not a schedule"]);
    expect([badSchedule.code, badSchedule.stderr]).toEqual([1, expect.stringContaining("INVALID_ARGUMENT: invalid cron expression")]);

    // Failures: a gRPC status on stderr (exit 1); a usage mistake (exit 2).
    const missing = await sy(a, ["queue", "stats", "nope"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^switchyard: NOT_FOUND: queue "nope" is not declared/);
    const usage = await sy(a, ["queue", "declare", "x"]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--mode simple|reliable|stream is required");
    // An item id that begins with '-', not after --, is taken for an option: the message says where it goes.
    const dashed = await sy(a, ["queue", "requeue-dead", q, "-CXm9y5-4"]);
    expect([dashed.code, dashed.stderr]).toEqual([2, expect.stringContaining("Unknown option '-C'; if -C is an argument (an item id, say), put it after --")]);
    const unknown = await sy(a, ["queue", "frobnicate"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "queue frobnicate"');
    const help = await sy(a, ["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("queue peek-dead NAME");

    expect(await terminate(server)).toBe("code 0");
  });

  it("--address and --token are sent; an unreachable server is UNAVAILABLE", async () => {
    const r = await sy("127.0.0.1:1", ["queue", "list", "--timeout", "2s"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^switchyard: (UNAVAILABLE|DEADLINE_EXCEEDED): /);
    const server = await serve();
    const listed = await sy("127.0.0.1:1", ["queue", "list", "--address", server.grpc, "--token", "not-checked-here", "--json"]);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual({ queues: expect.any(Array) });
    expect(await terminate(server)).toBe("code 0");
  });
});

describe("switchyard serve with SWITCHYARD_OTEL=on", () => {
  it("imports the preload module before grpc-js", async () => {
    const server = await serve({ SWITCHYARD_OTEL: "on", SWITCHYARD_OTEL_MODULE: PRELOAD, SWITCHYARD_LOG_LEVEL: "info" });
    expect(server.stderr()).toContain("otel-preload: grpc-js already loaded: false\n");
    expect(server.stderr()).toContain('"msg":"opentelemetry preloaded"');
    expect(await terminate(server)).toBe("code 0");
  });

  it("refuses to start when the module cannot be loaded, and says what to do", async () => {
    const failed = await serve({ SWITCHYARD_OTEL: "on", SWITCHYARD_OTEL_MODULE: "@opentelemetry/not-installed-here" }).then(
      () => new Error("serve started"),
      (err: Error) => err,
    );
    expect(failed.message).toContain("exited with 1");
    expect(failed.message).toContain("SWITCHYARD_OTEL=on, but @opentelemetry/not-installed-here could not be loaded");
  });
});
