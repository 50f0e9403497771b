/**
 * Runs examples/python/worker.py (Debian's grpcio on /usr/bin/python3) against
 * a live Switchyard and Redis, and checks what it did in Redis directly.
 *
 * These tests never skip: when /usr/bin/python3 has no grpc, they fail.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leaseRecords, liveDeliveries, startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem } from "../../src/queue/envelope.js";

const execFileP = promisify(execFile);

const PYTHON = "/usr/bin/python3";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const WORKER = join(root, "examples/python/worker.py");
const GENERATE = join(root, "examples/python/generate.sh");

/** What `worker.py --tour` prints (see lease_and_settle there). */
interface TourDelivery {
  id: string;
  lease_token: string;
  fence: number;
  payload: string;
  headers: Record<string, string>;
  delivery_count: number;
  queue: string;
  enqueue_time_ms: number | null;
}
interface TourSummary {
  queue: string;
  enqueued: string[];
  opened: { queue: string; mode: string; heartbeat_interval_ms: number };
  deliveries: TourDelivery[];
  stream: { acked: string[]; retried: string[]; dropped: string[]; extended: string[]; acked_twice: string[] };
  settle_results: { lease_token: string; code: number; message: string; has_expire_time: boolean }[];
  unary: {
    extended: string[];
    extend_has_expire_time: boolean;
    acked: string[];
    retried: string[];
    retry_dead_lettered: boolean;
    dropped: string[];
  };
  errors: { rpc: string; lease_token: string; code: string; details: string }[];
  stream_ended: boolean;
  heartbeats: number;
  unexpected: string[];
}

let redis: TestRedis;
let sy: TestSwitchyard;
let genDir: string | undefined;
/** The worker's environment: the generated stubs on PYTHONPATH, and no proxy (loopback only). */
let workerEnv: NodeJS.ProcessEnv;
/**
 * Why the Python side cannot run, if it cannot. Each test throws it first:
 * vitest reports the tests of a failed beforeAll as skipped, and these must
 * fail when /usr/bin/python3 has no grpc, because CI must run them.
 */
let pythonProblem: Error | undefined;
const children: ChildProcess[] = [];

/** Checks that /usr/bin/python3 has grpc, and generates the stubs into a temp dir. */
async function preparePython(): Promise<void> {
  try {
    await execFileP(PYTHON, ["-c", "import grpc, grpc_tools"]);
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? String(err);
    throw new Error(
      `${PYTHON} cannot import grpc and grpc_tools, which the Python worker tests need ` +
        `(apt-get install python3-grpcio python3-grpc-tools):\n${stderr}`,
    );
  }
  genDir = mkdtempSync(join(tmpdir(), "sy-pygen-"));
  try {
    await execFileP("sh", [GENERATE, genDir], { env: { ...process.env, PYTHON } });
  } catch (err) {
    throw new Error(`${GENERATE} failed:\n${(err as { stderr?: string }).stderr ?? String(err)}`);
  }
  workerEnv = { ...process.env, PYTHONPATH: genDir, PYTHONDONTWRITEBYTECODE: "1" };
  for (const v of ["http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]) {
    delete workerEnv[v];
  }
}

function needPython(): void {
  if (pythonProblem) throw pythonProblem;
}

beforeAll(async () => {
  pythonProblem = await preparePython().then(
    () => undefined,
    (err: Error) => err,
  );
  redis = await startRedis();
  sy = await startSwitchyard(redis);
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await sy?.stop();
  await redis?.stop();
  if (genDir) rmSync(genDir, { recursive: true, force: true });
});

/** Decodes every item of a Redis list (left to right) as Switchyard stores it. */
async function itemsOf(key: string) {
  return (await redis.plain.lrangeBuffer(key, 0, -1)).map((value) => ({ value, item: decodeItem(value) }));
}

/** Polls `check` until it holds; fails with `what` after `ms` of real time. */
async function until(what: string, check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves with the first stdout line of `child` matching `pattern`; rejects if it exits first. */
function waitForLine(child: ChildProcess, pattern: RegExp, ms: number): Promise<string> {
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`no line matching ${pattern} within ${ms} ms; stderr:\n${stderr}`)), ms);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (pattern.test(line)) {
        clearTimeout(timer);
        ok(line);
      }
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      fail(new Error(`worker exited (code ${code}, signal ${signal}) before printing ${pattern}; stderr:\n${stderr}`));
    });
  });
}

describe("Python worker (examples/python/worker.py)", () => {
  it("a Python worker enqueues, leases, acks, retries and drops", async () => {
    needPython();
    const q = "{py}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });

    let stdout: string;
    try {
      ({ stdout } = await execFileP(PYTHON, [WORKER, "--address", sy.address, "--queue", q, "--tour", "--timeout", "15"], {
        env: workerEnv,
        timeout: 25_000,
      }));
    } catch (err) {
      const e = err as { code?: unknown; signal?: unknown; stderr?: string; stdout?: string };
      throw new Error(`worker.py --tour failed (code ${e.code}, signal ${e.signal}):\n${e.stderr}\n${e.stdout}`);
    }
    const lines = stdout.trim().split("\n");
    expect(lines).toHaveLength(1); // the summary is all it prints on stdout
    const s = JSON.parse(lines[0]) as TourSummary;

    // What the worker saw.
    expect(s.enqueued).toHaveLength(6);
    expect(new Set(s.enqueued).size).toBe(6);
    expect(s.opened).toEqual({ queue: q, mode: "QUEUE_MODE_RELIABLE", heartbeat_interval_ms: 15_000 });
    // One worker on a fresh queue: first in, first out.
    expect(s.deliveries.map((d) => d.id)).toEqual(s.enqueued);
    s.deliveries.forEach((d, i) => {
      expect(d.payload).toBe(`tour-${i + 1}`);
      expect(d.headers).toEqual({ origin: "python-tour", n: String(i + 1) });
      expect(d.delivery_count).toBe(1);
      expect(d.queue).toBe(q);
      expect(d.enqueue_time_ms).toBe(sy.clock.now()); // the ManualClock never moved
      expect(d.lease_token).toMatch(/^r\.\d+\.[0-9a-z]{10}\./);
    });
    expect(s.deliveries.map((d) => d.fence)).toEqual([1, 2, 3, 4, 5, 6]);
    const [ack, retry, drop, unaryAck, unaryRetry, unaryDrop] = s.deliveries;
    expect(s.stream).toEqual({
      acked: [ack.lease_token],
      retried: [retry.lease_token],
      dropped: [drop.lease_token],
      extended: [unaryAck.lease_token],
      acked_twice: [ack.lease_token],
    });
    // Only the extend and the failed second ack were echoed on the stream.
    expect(s.settle_results).toHaveLength(2);
    expect(s.settle_results.find((r) => r.lease_token === unaryAck.lease_token)).toEqual({
      lease_token: unaryAck.lease_token,
      code: 0,
      message: "",
      has_expire_time: false, // no recovery set, so no watchdog deadline
    });
    const second = s.settle_results.find((r) => r.lease_token === ack.lease_token)!;
    expect(second.code).toBe(9); // FAILED_PRECONDITION
    expect(second.message).toContain("no longer held");
    expect(s.unary).toEqual({
      extended: [unaryRetry.lease_token],
      extend_has_expire_time: false,
      acked: [unaryAck.lease_token],
      retried: [unaryRetry.lease_token],
      retry_dead_lettered: false,
      dropped: [unaryDrop.lease_token],
    });
    expect(s.errors).toHaveLength(1);
    expect(s.errors[0]).toMatchObject({ rpc: "Ack", lease_token: retry.lease_token, code: "FAILED_PRECONDITION" });
    expect(s.errors[0].details).toContain("no longer held");
    expect(s.stream_ended).toBe(true);
    expect(s.unexpected).toEqual([]); // in particular, no delivery after credit 0

    // What Redis holds now. Nothing is in flight.
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    expect(await redis.plain.llen(`${q}.dead`)).toBe(0);
    expect(await redis.plain.get(`${q}.fence`)).toBe("6");
    // Only the two retried items are back in the queue, at its back (the left
    // end, where LPUSH adds): the one retried on the stream first, so it is
    // nearer the right end, where workers take from.
    const queued = await itemsOf(q);
    expect(queued.map((x) => x.item.id)).toEqual([unaryRetry.id, retry.id]);
    expect(queued.map((x) => Buffer.from(x.item.payload).toString())).toEqual(["tour-5", "tour-2"]);
    expect(queued.map((x) => x.item.headers)).toEqual([
      { origin: "python-tour", n: "5" },
      { origin: "python-tour", n: "2" },
    ]);
    // Acked and dropped items left no record (and count as completed); the retried ones carry one delivery each.
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    expect(queued.map((x) => x.item.deliveries)).toEqual([1, 1]);
    expect(Number(await redis.plain.hget(`${q}.leases`, "completed"))).toBeGreaterThan(0);

    // The retried items come back to the next worker, on their second delivery.
    const lease = sy.client.lease(q, 2);
    const again = await lease.take(2);
    expect(again.map((d) => [d.id, d.deliveryCount])).toEqual([
      [retry.id, 2],
      [unaryRetry.id, 2],
    ]);
    await Promise.all(again.map((d) => sy.client.ack(d.leaseToken)));
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await redis.plain.llen(q)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    await lease.close();
  });

  it("a worker killed with SIGKILL while holding 100 reliable items loses none", async () => {
    needPython();
    const q = "{kill}";
    const claims = "{kill}.claims";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, recoverySet: claims, minIdle: { seconds: 60n } });
    const ids = await sy.client.enqueue(
      q,
      Array.from({ length: 100 }, (_, i) => `job-${i}`),
    );
    const startedAt = sy.clock.now();

    const worker = spawn(PYTHON, [WORKER, "--address", sy.address, "--queue", q, "--hold", "100", "--timeout", "15"], {
      env: workerEnv,
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(worker);
    const exited = new Promise<NodeJS.Signals | null>((ok) => worker.once("exit", (_code, signal) => ok(signal)));
    const line = await waitForLine(worker, /^HOLDING /, 20_000);
    const [, count, list] = line.split(" ");
    expect(Number(count)).toBe(100);
    expect(list.split(",").sort()).toEqual([...ids].sort());

    // The worker holds all 100: each is in the processing list with a claim.
    expect(await redis.plain.llen(q)).toBe(0);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(100);
    expect(await redis.plain.zcard(claims)).toBe(100);
    expect(await liveDeliveries(redis.plain, `${q}.leases`)).toBe(100);

    process.kill(worker.pid!, "SIGKILL");
    expect(await exited).toBe("SIGKILL");

    // The kernel closes the dead worker's connection; the server sees its Lease
    // stream end and returns the items at once. The clock is not advanced, so
    // min_idle never passes and the watchdog cannot be what returns them.
    await until("the killed worker's 100 items are back in the queue", async () => (await redis.plain.llen(q)) === 100);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await redis.plain.zcard(claims)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    expect((await itemsOf(q)).map((x) => x.item.id).sort()).toEqual([...ids].sort());

    const lease = sy.client.lease(q, 100);
    const again = await lease.take(100);
    expect(again.map((d) => d.id).sort()).toEqual([...ids].sort());
    expect(again.map((d) => d.deliveryCount)).toEqual(Array(100).fill(2)); // the killed worker's lease counted
    expect(await redis.plain.llen(`${q}.processing`)).toBe(100);

    await Promise.all(again.map((d) => sy.client.ack(d.leaseToken)));
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await redis.plain.llen(q)).toBe(0);
    expect(await redis.plain.zcard(claims)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    expect(await redis.plain.llen(`${q}.dead`)).toBe(0);
    await lease.close();

    expect(sy.clock.now()).toBe(startedAt); // no time passed for Switchyard
  });
});
