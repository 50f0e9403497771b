/**
 * A unary call's request, once read, is held once: as its message, not also
 * as the HTTP/2 data frames it came in. grpc-js's message decoder keeps the
 * frames of the last message it read until the next one starts, which on a
 * unary call never happens, so every unary Enqueue waiting on a slow Redis
 * held its request twice besides the items encoded for Redis (bench row 11:
 * the server's memory while Redis hangs).
 *
 * Measured as the server sees it: Buffer memory (`arrayBuffers`) of this
 * process, which runs the server, held per byte of items sent by a client
 * process of its own, while a proxy holds Redis's answers back, so that every
 * call is read and waits for Redis.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const CALLS = 16;
const ITEM_BYTES = 256 * 1024;

let redis: StandaloneRedis;
let proxy: TcpProxy;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startStandaloneRedis();
  proxy = await startProxy(`unix:${redis.socketPath}`);
  sy = await startSwitchyard(redis, {
    config: { redis: { kind: "standalone", url: `redis://${proxy.address}` }, redisCommandTimeoutMs: 60_000, maxPendingEnqueueBytes: 64 << 20 },
  });
  await sy.client.createQueue({ name: "{frames}", mode: QueueMode.RELIABLE });
  await sy.client.enqueue("{frames}", ["warm-up"]);
});
afterAll(async () => {
  proxy?.restore();
  await sy?.stop();
  await proxy?.close();
  await redis?.stop();
});

function heldBuffers(): number {
  gc();
  gc();
  return process.memoryUsage().arrayBuffers;
}

/** A client process that sends CALLS unary Enqueues of one ITEM_BYTES item each at once and prints how many ids came back. */
function sendFromAnotherProcess(address: string): Promise<string> {
  const client = fileURLToPath(new URL("../../dist/client/index.js", import.meta.url));
  const child = spawn(process.execPath, [
    "--input-type=module",
    "-e",
    `import { SwitchyardClient } from ${JSON.stringify(client)};
     const c = new SwitchyardClient(${JSON.stringify(address)}, { enqueueStream: false, coalesceEnqueues: false, timeoutMs: 60000 });
     const item = Buffer.alloc(${ITEM_BYTES}, 0x5a);
     const ids = await Promise.all(Array.from({ length: ${CALLS} }, () => c.enqueue("{frames}", [item])));
     process.stdout.write(String(ids.flat().length));
     c.close();`,
  ], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  return new Promise((ok) => child.on("exit", () => ok(out)));
}

describe("a unary Enqueue waiting on Redis", () => {
  it("holds its item about once (encoded on its way to Redis), not also as its request's data frames", async () => {
    const before = heldBuffers();
    proxy.holdReplies();
    const sent = sendFromAnotherProcess(sy.address);
    await expect.poll(() => sy.app.queues.pendingEnqueueBytes, { timeout: 20_000 }).toBeGreaterThanOrEqual(CALLS * ITEM_BYTES);
    const heldPerByte = (heldBuffers() - before) / (CALLS * ITEM_BYTES);
    proxy.restore();
    expect(await sent).toBe(String(CALLS));
    // What Redis has not answered is kept (the items encoded for it: 1×); the request's frames are not (another 1×).
    expect(heldPerByte).toBeGreaterThan(0.8);
    expect(heldPerByte).toBeLessThan(1.5);
  });
});
