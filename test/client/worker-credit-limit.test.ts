/**
 * runWorker with a concurrency above the server's SWITCHYARD_MAX_CREDIT: the
 * server refuses a stream opened with more credit than it allows, naming its
 * limit (ErrorInfo metadata max_credit), and the worker opens again within it:
 * it runs that many at once and says so once, rather than being refused
 * forever with a report of each refusal.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { runWorker } from "../../src/client/worker.js";
import { errorDetails } from "../../src/client/errors.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const MAX_CREDIT = 20;
const Q = "{frames}";
let redis: TestRedis;
let sy: TestSwitchyard;
beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis, { config: { maxCredit: MAX_CREDIT } });
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
});
afterAll(async () => {
  await sy.stop();
  await redis.stop();
});

describe("a worker whose concurrency is above the server's credit limit", () => {
  it("is told the limit by the refusal", async () => {
    const session = sy.client.lease(Q, MAX_CREDIT + 1);
    const err = await session.opened.then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ code: 3 });
    expect(errorDetails(err)).toMatchObject({ reason: "INVALID_FIELD", metadata: { max_credit: String(MAX_CREDIT) } });
    await session.ended;
  });

  it("runs as many at once as the server allows, reports that once, and finishes every item", async () => {
    const ids = await sy.client.enqueue(Q, Array.from({ length: 60 }, (_, i) => `frame ${i}`));
    let active = 0;
    let most = 0;
    let open!: () => void;
    const gate = new Promise<void>((ok) => (open = ok));
    const errors: unknown[] = [];
    const done = new Set<string>();
    const worker = runWorker({
      client: sy.client,
      queue: Q,
      concurrency: 50,
      onError: (err) => errors.push(err),
      handler: async (d) => {
        most = Math.max(most, ++active);
        await gate;
        active--;
        done.add(d.id);
      },
    });
    // The server never leases this worker's stream more than its credit: 20 in processing, 20 running.
    await expect.poll(() => active, { timeout: 10_000 }).toBe(MAX_CREDIT);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(MAX_CREDIT);
    open();
    await expect.poll(() => done.size, { timeout: 10_000 }).toBe(60);
    await worker.stop();
    expect([...done].sort()).toEqual([...ids].sort());
    expect(most).toBe(MAX_CREDIT);
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toContain(`SWITCHYARD_MAX_CREDIT (${MAX_CREDIT})`);
    expect(await redis.plain.llen(Q)).toBe(0);
    expect(await redis.plain.llen(`${Q}.processing`)).toBe(0);
  });
});
