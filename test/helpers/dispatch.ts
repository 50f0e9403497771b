/** A QueueDispatcher's host for tests that drive one dispatcher on its own. */
import type { Clock } from "../../src/clock.js";
import type { Logger } from "../../src/log.js";
import type { RedisConnection } from "../../src/redis/connection.js";
import type { DispatchHost } from "../../src/queue/dispatcher.js";

/** A host that leases as instance "test", in batches of 10, and waits on blocking reads with no timeout. */
export function testDispatchHost(redis: RedisConnection, clock: Clock, log: Logger): DispatchHost {
  return {
    redis, clock, log, owner: "test",
    options: { leaseBatch: 10, blockTimeoutSec: 0 },
    onHold: () => undefined,
    giveBack: () => undefined,
    kill: () => undefined,
    reconcile: async () => undefined,
  };
}
