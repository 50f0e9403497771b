/** A QueueDispatcher's host for tests that drive one dispatcher on its own. */
import type { Clock } from "../../src/clock.js";
import type { Logger } from "../../src/log.js";
import { afterAll, beforeAll } from "vitest";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import type { DispatchHost } from "../../src/queue/dispatcher.js";
import { startStandaloneRedis, type StandaloneRedis } from "./redis.js";

/** A host that leases as instance "test", in batches of 10, and waits on blocking reads with no timeout. */
export function testDispatchHost(redis: RedisConnection, clock: Clock, log: Logger): DispatchHost {
  return {
    redis, clock, log, owner: "test",
    options: { leaseBatch: 10, blockTimeoutSec: 0 },
    onHold: () => undefined,
    giveBack: async () => undefined,
    kill: () => undefined,
    reconcile: async () => undefined,
    current: () => Promise.reject(new Error("these tests drive list queues' dispatchers, which never read a declaration")),
  };
}

/** A standalone Redis and a command connection to it for a file's dispatcher tests, started before them and stopped after. */
export function useDispatchRedis(log: Logger): { readonly redis: StandaloneRedis; readonly conn: RedisConnection } {
  let redis: StandaloneRedis | undefined;
  let conn: RedisConnection | undefined;
  beforeAll(async () => {
    redis = await startStandaloneRedis();
    conn = await connectRedis(redis.target, log);
  });
  afterAll(async () => {
    await conn?.close();
    await redis?.stop();
  });
  return {
    get redis() {
      return redis!;
    },
    get conn() {
      return conn!;
    },
  };
}
