/**
 * Issue 12 defects 3 and 4, and SPEC Q14's "nothing stranded": no item leaves
 * a queue without reaching a holder, and nothing stays in a processing list
 * once its holder is gone, with or without a recovery set:
 * - a simple queue's pop is numbered in the same call (a failure leaves the items);
 * - a closed stream's items go back even when Redis cannot take them at that moment;
 * - a killed instance's deliveries go back once it has been silent for
 *   SWITCHYARD_INSTANCE_TIMEOUT, returned by another instance;
 * - a lease whose answer was lost (a reconnect) is given back, uncounted, by its own instance;
 * - items handed to a stream that can no longer write go back at once;
 * - a dispatcher closed while it opens its blocking connection leaks none.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { connectRedis } from "../../src/redis/connection.js";
import { defineScripts, leaseItems } from "../../src/redis/scripts.js";
import { queueKeys } from "../../src/redis/keys.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { killStarted, startChaosRedis, startServer, type ChaosRedis } from "../chaos/harness/procs.js";
import { testDispatchHost } from "../helpers/dispatch.js";
import { leaseRecords } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let redis: ChaosRedis;
const started: TestSwitchyard[] = [];
const clients: SwitchyardClient[] = [];

beforeAll(async () => {
  redis = await startChaosRedis({ aof: true });
});
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await Promise.all(started.splice(0).map((s) => s.stop()));
});
afterAll(async () => {
  killStarted();
  await redis?.stop();
});

const target = () => ({ kind: "socket" as const, path: redis.socketPath });

async function instance(options: Parameters<typeof startSwitchyard>[1] = {}): Promise<TestSwitchyard> {
  const sy = await startSwitchyard({ target: target() }, options);
  started.push(sy);
  return sy;
}

/** Log lines of an instance, as it writes them. */
function capture(): { lines: Record<string, unknown>[]; log: ReturnType<typeof createLogger> } {
  const lines: Record<string, unknown>[] = [];
  return { lines, log: createLogger("warn", (line) => lines.push(JSON.parse(line) as Record<string, unknown>)) };
}

describe("a simple queue whose numbering fails", () => {
  it("keeps every item in the queue, and delivers them all once numbering works again", async () => {
    const { lines, log } = capture();
    const sy = await instance({ log });
    await sy.client.createQueue({ name: "{sq}", mode: QueueMode.SIMPLE });
    const payloads = Array.from({ length: 50 }, (_, i) => `item-${i}`);
    await redis.plain.lpush("{sq}", ...payloads);
    await redis.plain.set("{sq}.fence", "not a number"); // the counter broken under Switchyard's feet
    const session = sy.client.lease("{sq}", 10);
    await expect.poll(() => lines.filter((l) => l.msg === "lease pump failed; retrying").length).toBeGreaterThanOrEqual(3);
    expect(await redis.plain.llen("{sq}")).toBe(50);

    await redis.plain.del("{sq}.fence");
    const got: string[] = [];
    while (got.length < 50) {
      for (const d of await session.take(1)) {
        got.push(Buffer.from(d.payload).toString());
        session.ack(d.leaseToken);
      }
    }
    expect(got).toEqual(payloads);
    await session.close();
  });
});

describe("a closed stream's items", () => {
  it("go back to the queue once Redis is back, when Redis was down as the stream ended", async () => {
    const sy = await instance();
    const q = "{back}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const ids = await sy.client.enqueue(q, ["a", "b", "c"]);
    const session = sy.client.lease(q, 3);
    expect((await session.take(3)).map((d) => d.id)).toEqual(ids);
    await redis.kill();
    await session.close(); // the server's return fails: Redis is gone
    await redis.restart();
    await expect.poll(() => redis.plain.llen(q), { timeout: 10_000 }).toBe(3);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    // Returned as a closed stream's are: counted, in their order.
    const again = sy.client.lease(q, 3);
    expect((await again.take(3)).map((d) => [d.id, d.deliveryCount])).toEqual(ids.map((id) => [id, 2]));
    await again.close();
  });
});

describe("a killed instance's deliveries", () => {
  it("go back to the queue once it has been silent for the instance timeout, with no recovery set", async () => {
    const env = { SWITCHYARD_INSTANCE_TIMEOUT: "1500ms", SWITCHYARD_WATCHDOG_INTERVAL: "200ms" };
    const doomed = await startServer("holders-doomed", redis, { env });
    const survivor = await instance({ clock: "redis", env });
    const q = "{orphaned}";
    await survivor.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const ids = await survivor.client.enqueue(q, ["1", "2", "3", "4"]);
    const toDoomed = new SwitchyardClient(doomed.address);
    clients.push(toDoomed);
    const session = toDoomed.lease(q, 4);
    expect((await session.take(4)).map((d) => d.id)).toEqual(ids);
    doomed.kill("SIGKILL");
    await doomed.exited;
    expect(await redis.plain.llen(`${q}.processing`)).toBe(4);

    await expect.poll(() => redis.plain.llen(q), { timeout: 10_000 }).toBe(4);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    expect(await leaseRecords(redis.plain, `${q}.leases`)).toEqual([]);
    const again = survivor.client.lease(q, 4);
    expect((await again.take(4)).map((d) => [d.id, d.deliveryCount]).sort()).toEqual(ids.map((id) => [id, 2]).sort());
    await again.close();
  });
});

describe("a lease whose answer was lost", () => {
  it("is given back by its own instance when it reconnects, uncounted: it never reached a worker", async () => {
    const sy = await instance();
    const q = "{lost}";
    await sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const session = sy.client.lease(q, 1);
    await session.opened;
    session.setCredit(0);
    const [id] = await sy.client.enqueue(q, ["lost"]);
    // The lease script ran for this instance, but its answer never came back (the connection was cut).
    const keys = queueKeys(q, `${q}.processing`, `${q}.dead`, "");
    defineScripts(redis.plain);
    const [leased] = await leaseItems(redis.plain, keys, { now: sy.clock.now(), max: 1, recoveryTtlMs: 0, owner: sy.app.queues.instances.id });
    expect(leased.value.length).toBeGreaterThan(0);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(1);
    sy.app.redis.client.emit("ready"); // what ioredis emits once it has reconnected
    await expect.poll(() => redis.plain.llen(q)).toBe(1);
    expect(await redis.plain.llen(`${q}.processing`)).toBe(0);
    session.setCredit(1);
    const [d] = await session.take(1);
    expect([d.id, d.deliveryCount, d.lastError]).toEqual([id, 1, ""]);
    session.ack(d.leaseToken);
    await session.close();
  });
});

describe("a dispatcher's streams", () => {
  const log = createLogger("silent");

  it("give items back, in order and uncounted, when the stream can no longer write them", async () => {
    const conn = await connectRedis(target(), log);
    try {
      for (const mode of ["simple", "reliable"] as const) {
        const clock = new ManualClock();
        const config = validateQueueSpec({ name: `{ended-${mode}}`, mode }, clock.now());
        await redis.plain.lpush(config.name, "a", "b", "c");
        const host = testDispatchHost(conn, clock, log);
        const givenBack: string[] = [];
        const dispatcher = new QueueDispatcher(config, { ...host, giveBack: async (_, refs) => givenBack.push(...refs.map((r) => String(r.fence))) });
        const sink = { deliver: () => false, heartbeat() {}, fail() {}, drain() {}, end() {} };
        const stream = new LeaseStream(config, 3, sink, clock.now());
        dispatcher.add(stream);
        if (mode === "simple") await expect.poll(() => redis.plain.lrange(config.name, 0, -1)).toEqual(["c", "b", "a"]); // as pushed
        else await expect.poll(() => givenBack).toEqual(["3", "2", "1"]); // last taken first: the queue keeps its order
        expect(stream.held.size).toBe(0);
        dispatcher.close();
      }
    } finally {
      await conn.close();
    }
  });

  it("a dispatcher closed while its blocking connection is being made closes that connection", async () => {
    const conn = await connectRedis(target(), log);
    const clients = async () => String(await redis.plain.client("LIST")).trim().split("\n").length;
    try {
      const before = await clients();
      for (let n = 0; n < 20; n++) {
        const clock = new ManualClock();
        const config = validateQueueSpec({ name: `{empty-${n}}`, mode: "reliable" }, clock.now());
        const dispatcher = new QueueDispatcher(config, testDispatchHost(conn, clock, log));
        const delivered: Delivery[] = [];
        dispatcher.add(new LeaseStream(config, 1, { deliver: (b) => delivered.push(...b) > 0, heartbeat() {}, fail() {}, drain() {}, end() {} }, clock.now()));
        // The pump found the queue empty and is connecting its blocking connection: close now,
        // before that connection is ready.
        await expect.poll(clients, { interval: 1 }).toBeGreaterThan(before);
        dispatcher.close();
        await expect.poll(clients).toBe(before);
      }
    } finally {
      await conn.close();
    }
  });
});
