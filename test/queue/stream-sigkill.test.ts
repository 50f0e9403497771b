/**
 * STREAM queues (issue 16): a worker SIGKILLed while it holds entries. Its
 * entries are delivered again with delivery count 2, none lost, none acked
 * twice, and its tokens are refused after the reclaim. (a) Only the worker
 * dies: the server sees its stream end and hands the entries back at once.
 * (b) The worker and the Switchyard instance serving it die together: nobody
 * hands anything back; another instance reclaims the entries once they were
 * idle for min_idle (XAUTOCLAIM).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { PYTHON, WORKER, preparePython, type PythonWorker } from "../helpers/python.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const CLI = join(resolve(dirname(fileURLToPath(import.meta.url)), "../.."), "dist/cli/main.js");
const MIN_IDLE_MS = 1000;
const N = 20;
const t = useSwitchyard();
let python: PythonWorker;
const children: ChildProcess[] = [];

beforeAll(async () => {
  python = await preparePython();
});
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  python?.cleanup();
});

/** The first line of `child`'s stdout matching `pattern`. */
function lineOf(child: ChildProcess, pattern: RegExp, what: string): Promise<RegExpExecArray> {
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`no ${what} within 20 s; stderr:\n${stderr}`)), 20_000);
    child.once("exit", (code) => fail(new Error(`exited (${code}) before ${what}; stderr:\n${stderr}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = pattern.exec(line);
      if (m) {
        clearTimeout(timer);
        ok(m);
      }
    });
  });
}

/** worker.py --hold n in group g; resolves once it holds them, with their ids and tokens. */
async function holdingWorker(address: string, queue: string): Promise<{ child: ChildProcess; ids: string[]; tokens: string[] }> {
  const child = spawn(PYTHON, [WORKER, "--address", address, "--queue", queue, "--group", "g", "--hold", String(N), "--timeout", "20"], {
    env: python.env, stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  const [, count, ids, tokens] = await lineOf(child, /^HOLDING (\d+) (\S+) (\S+)$/, "HOLDING");
  expect(Number(count)).toBe(N);
  return { child, ids: ids.split(","), tokens: tokens.split(",") };
}

function kill(child: ChildProcess): Promise<unknown> {
  const exited = new Promise((ok) => child.once("exit", ok));
  child.kill("SIGKILL");
  return exited;
}

/** Leases the queue's N entries again on the test instance, checks them, and acks each once. */
async function takeBackAndAck(queue: string, ids: string[], stale: string[]): Promise<void> {
  const lease = t.sy.client.lease(queue, N, { group: "g" });
  const again = await lease.take(N);
  expect(again.map((d) => d.id).sort()).toEqual([...ids].sort());
  expect(again.map((d) => d.deliveryCount)).toEqual(Array(N).fill(2));
  // The dead worker's tokens no longer hold anything.
  for (const token of stale.slice(0, 3)) {
    await expect(t.sy.client.ack(token)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("superseded") });
  }
  await Promise.all(again.map((d) => t.sy.client.ack(d.leaseToken)));
  // Each acked once: a second ack of any is refused, the group has nothing pending, and nothing was dead-lettered.
  await expect(t.sy.client.ack(again[0].leaseToken)).rejects.toMatchObject({ code: 9, details: expect.stringContaining("no longer held") });
  const stats = await t.sy.client.getQueueStats(queue);
  expect(stats).toMatchObject({ completedTotal: BigInt(N), deadLetter: 0n, processing: 0n });
  expect(stats.groups[0]).toMatchObject({ pending: 0n, lag: 0n });
  await lease.close();
}

describe("a worker SIGKILLed while holding stream entries", () => {
  it("(a) only the worker dies: its entries come back at once, with count 2; stale tokens refused", { timeout: 60_000 }, async () => {
    const Q = "{killed-worker}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(60_000) });
    const ids = await t.sy.client.enqueue(Q, Array.from({ length: N }, (_, i) => `job-${i}`));
    const worker = await holdingWorker(t.sy.address, Q);
    expect(worker.ids.sort()).toEqual([...ids].sort());
    await kill(worker.child);
    // min_idle is a minute: only the closed stream's hand-back can bring them back within the test.
    await takeBackAndAck(Q, ids, worker.tokens);
  });

  it("(b) the worker and its instance die: another instance reclaims the entries after min_idle, with count 2", { timeout: 60_000 }, async () => {
    const Q = "{killed-instance}";
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.STREAM, groups: [{ name: "g" }], minIdle: durationFromMs(MIN_IDLE_MS) });
    const ids = await t.sy.client.enqueue(Q, Array.from({ length: N }, (_, i) => `job-${i}`));
    const server = spawn(process.execPath, [CLI, "serve"], {
      env: { ...process.env, ...t.redis.env, SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0", SWITCHYARD_LOG_LEVEL: "warn" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(server);
    const [, address] = await lineOf(server, /^switchyard listening on (\S+)$/, "the gRPC address");
    const since = Date.now(); // before the entries are delivered to the worker
    const worker = await holdingWorker(address, Q);
    await kill(server);
    await kill(worker.child);
    // Still pending under the dead instance's consumer: nobody handed them back.
    const pending = (await t.redis.plain.xpending(Q, "g")) as [number, string, string, [string, string][]];
    expect(pending[0]).toBe(N);
    expect(pending[3].map(([consumer]) => consumer)).not.toContain("switchyard.parked");
    await takeBackAndAck(Q, ids, worker.tokens);
    // Reclaimed by idle time, which Redis counts from each entry's delivery to the worker.
    expect(Date.now() - since).toBeGreaterThanOrEqual(MIN_IDLE_MS);
  });
});
