/**
 * examples/python/producer.py (Debian's grpcio on /usr/bin/python3) enqueues
 * over one EnqueueStream against a live Switchyard with auth on: every request
 * is answered by id, a refused one alone. Checked in Redis directly.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenHash } from "../../src/auth/authenticator.js";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { PRODUCER, preparePython, type PythonWorker } from "../helpers/python.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const ADMIN = randomBytes(24).toString("base64url");
const PY = randomBytes(24).toString("base64url");

let redis: TestRedis;
let sy: TestSwitchyard;
let python: PythonWorker;

beforeAll(async () => {
  python = await preparePython();
  redis = await startRedis();
  const tokens = [
    { name: "admin", sha256: tokenHash(ADMIN), scopes: ["*"] },
    { name: "python producer", sha256: tokenHash(PY), scopes: ["queue:enqueue:{py}*"] },
  ];
  sy = await startSwitchyard(redis, { token: ADMIN, env: { SWITCHYARD_AUTH_TOKENS: JSON.stringify(tokens) } });
  await sy.client.createQueue({ name: "{py}", mode: QueueMode.RELIABLE });
  await sy.client.createQueue({ name: "{py}.b", mode: QueueMode.SIMPLE });
  await sy.client.createQueue({ name: "{other}", mode: QueueMode.SIMPLE });
}, 60_000);
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
  python?.cleanup();
});

interface Summary {
  stream_status: string;
  results: ({ queue: string; ids: string[] } | { queue: string; code: string; message: string })[];
}

describe("the Python producer on EnqueueStream", () => {
  it("gets ids for each request, its own status for a refused one, and the stream ends OK", async () => {
    const out = await python.run(["--address", sy.address, `--token=${PY}`, "--items", "4", "{py}", "{other}", "{py}.b", "{py}.missing", "{py}"], 25_000, PRODUCER);
    const summary = JSON.parse(out) as Summary;
    expect(summary.stream_status).toBe("OK");
    expect(summary.results.map((r) => ("ids" in r ? { queue: r.queue, ids: r.ids.length } : r))).toEqual([
      { queue: "{py}", ids: 4 },
      {
        queue: "{other}",
        code: "PERMISSION_DENIED",
        message: 'EnqueueStream on queue "{other}" needs scope queue:enqueue:{other} (or a pattern that matches "{other}"); caller "python producer" does not have it',
      },
      { queue: "{py}.b", ids: 4 },
      { queue: "{py}.missing", code: "NOT_FOUND", message: expect.stringContaining("{py}.missing") as unknown as string },
      { queue: "{py}", ids: 4 },
    ]);
    const py = await sy.client.peekQueue("{py}", QueueList.READY, 20);
    const first = summary.results[0] as { ids: string[] };
    const last = summary.results[4] as { ids: string[] };
    expect(py.items.map((i) => [i.id, Buffer.from(i.payload).toString()])).toEqual(
      [...first.ids, ...last.ids].map((id, n) => [id, `{py} ${n % 4}`]),
    );
    expect(await redis.plain.llen("{py}.b")).toBe(4);
    expect(await redis.plain.llen("{other}")).toBe(0);
  });
});
