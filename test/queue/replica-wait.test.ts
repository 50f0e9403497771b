/** Enqueue that waits for replicas (Redis WAIT): min_replicas and replica_timeout. */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import type { TestRedis } from "../helpers/redis.js";

/** The master, as the switchyard helper needs it (this file manages the servers itself). */
const redisAt = (path: string) => ({ target: { kind: "socket", path } }) as unknown as TestRedis;
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const freePort = () =>
  new Promise<number>((ok) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => ok(port));
    });
  });

let dir: string;
let master: EmbeddedRedis;
let replica: EmbeddedRedis;
let plain: Redis;
let sy: TestSwitchyard;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-wait-"));
  const port = await freePort();
  master = await startEmbeddedRedis({ dir: join(dir, "m"), appendOnly: false, port });
  replica = await startEmbeddedRedis({ dir: join(dir, "r"), appendOnly: false, extraArgs: ["--replicaof", "127.0.0.1", String(port)] });
  plain = new Redis({ path: master.socketPath });
  const replicaClient = new Redis({ path: replica.socketPath });
  for (let i = 0; i < 500 && !(await replicaClient.info("replication")).includes("master_link_status:up"); i++) {
    await new Promise((r) => setTimeout(r, 20)); // waits for the replica's first sync, not for time to pass
  }
  replicaClient.disconnect();
  sy = await startSwitchyard(redisAt(master.socketPath));
  await sy.client.createQueue({ name: "{w}", mode: QueueMode.RELIABLE });
});
afterAll(async () => {
  await sy.stop();
  plain.disconnect();
  await replica.stop();
  await master.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("enqueue with min_replicas", () => {
  it("answers once the replica has the items", async () => {
    const [id] = await sy.client.enqueue("{w}", ["kept"], { minReplicas: 1, replicaTimeoutMs: 5000 });
    expect(id).toBeTruthy();
    expect(await plain.llen("{w}")).toBe(1);
  });

  it("is UNAVAILABLE, saying how many replicas acknowledged, when fewer have them in time", async () => {
    await expect(sy.client.enqueue("{w}", ["maybe"], { minReplicas: 2, replicaTimeoutMs: 100 })).rejects.toMatchObject({
      code: 14,
      details: expect.stringContaining("only 1 of 2 replica(s)"),
    });
  });

  it("waits longer than the command timeout when asked to, without holding up other calls meanwhile", async () => {
    const quick = await startSwitchyard(redisAt(master.socketPath), { config: { redisCommandTimeoutMs: 300 } });
    try {
      const started = Date.now();
      const waiting = quick.client.enqueue("{w}", ["slow"], { minReplicas: 2, replicaTimeoutMs: 1000 }).catch((e: { code: number; details: string }) => e);
      // WAIT blocks the connection it is sent on: other calls must not queue behind it.
      await quick.client.getQueueStats("{w}");
      const statsMs = Date.now() - started;
      const outcome = await waiting;
      expect(outcome).toMatchObject({ code: 14, details: expect.stringContaining("only 1 of 2 replica(s) acknowledged them within 1000 ms") });
      expect(Date.now() - started).toBeGreaterThanOrEqual(1000); // not cut at the 300 ms command timeout
      expect(statsMs).toBeLessThan(500);
    } finally {
      await quick.stop();
    }
  });

  it("waits for replicas on a STREAM queue too: the entries are on the replica when it answers", async () => {
    await sy.client.createQueue({ name: "{ws}", mode: QueueMode.STREAM, groups: [{ name: "g" }] });
    const ids = await sy.client.enqueue("{ws}", ["a", "b"], { minReplicas: 1, replicaTimeoutMs: 5000 });
    expect(ids).toHaveLength(2);
    const onReplica = new Redis({ path: replica.socketPath });
    try {
      expect((await onReplica.xrange("{ws}", "-", "+")).map(([id]) => id)).toEqual(ids);
    } finally {
      onReplica.disconnect();
    }
    await expect(sy.client.enqueue("{ws}", ["c"], { minReplicas: 2, replicaTimeoutMs: 100 })).rejects.toMatchObject({
      code: 14,
      details: expect.stringContaining("only 1 of 2 replica(s)"),
    });
  });
});
