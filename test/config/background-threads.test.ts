/**
 * The server process (`node dist/main.js`, as `npm start` runs it) puts every
 * thread but its main one (V8's compiler and GC helpers, libuv's pool) at the
 * nice value SWITCHYARD_BACKGROUND_NICE names, 19 by default, so that a helper
 * gives way to the main thread; 0 leaves them alone. Read from each thread's
 * /proc stat. Runs the build in dist/ (npm test builds).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { getPriority } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const linux = process.platform === "linux";

let redis: TestRedis;
const children: ChildProcess[] = [];
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await redis?.stop();
});

/** Starts `node dist/main.js` with `env`; resolves with the child and its gRPC address once it listens, or rejects with its stderr. */
function serve(env: Record<string, string>): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(process.execPath, [join(root, "dist/main.js")], {
    cwd: root,
    env: { ...process.env, ...redis.env, SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "off", SWITCHYARD_LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((ok, fail) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const address = /^switchyard listening on (\S+)$/.exec(line)?.[1];
      if (address) ok({ child, address });
    });
    child.once("exit", (code) => fail(new Error(`exited with ${code}; stderr:\n${stderr}`)));
  });
}

/** Each thread's nice value (the 19th field of /proc/PID/task/TID/stat), by thread id. */
function niceValues(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces) start at the 3rd.
    out.set(Number(tid), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19 - 3]));
  }
  return out;
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((ok) => child.once("exit", ok));
  child.kill("SIGTERM");
  await exited;
}

describe.runIf(linux)("the server's background threads", () => {
  it("run at nice 19 by default, below the main thread, and the server serves", async () => {
    const { child, address } = await serve({});
    const nice = niceValues(child.pid!);
    const inherited = getPriority();
    expect(nice.get(child.pid!)).toBe(inherited);
    const helpers = [...nice].filter(([tid]) => tid !== child.pid).map(([, n]) => n);
    // V8's platform workers (4 by default) at least.
    expect(helpers.length).toBeGreaterThanOrEqual(4);
    expect(helpers).toEqual(helpers.map(() => Math.max(19, inherited)));
    const client = new SwitchyardClient(address);
    try {
      await client.createQueue({ name: "{nice}", mode: QueueMode.RELIABLE });
      expect(await client.enqueue("{nice}", ["a"])).toHaveLength(1);
    } finally {
      client.close();
    }
    await stop(child);
  });

  it("take the value SWITCHYARD_BACKGROUND_NICE names, and 0 leaves them as started", async () => {
    const inherited = getPriority();
    for (const [value, expected] of [
      ["7", Math.max(7, inherited)],
      ["0", inherited],
    ] as const) {
      const { child } = await serve({ SWITCHYARD_BACKGROUND_NICE: value });
      const nice = niceValues(child.pid!);
      expect(nice.get(child.pid!)).toBe(inherited);
      expect([...nice].filter(([tid]) => tid !== child.pid).every(([, n]) => n === expected)).toBe(true);
      await stop(child);
    }
  });

  it("refuse a value that is no nice value, naming the variable", async () => {
    for (const value of ["20", "-1", "high", "1.5"]) {
      await expect(serve({ SWITCHYARD_BACKGROUND_NICE: value })).rejects.toThrow(
        `SWITCHYARD_BACKGROUND_NICE="${value}" must be a nice value from 0 (leave the threads alone) to 19`,
      );
    }
  });
});
