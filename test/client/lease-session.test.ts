/** LeaseSession's own behaviour against a real server. */
import { describe, expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

describe("LeaseSession.cancel", () => {
  it("ends the stream on the server too when called in the same turn as lease(), returning what it was given", async () => {
    const { sy, redis } = t;
    const Q = "{cancelled}";
    await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    await sy.client.enqueue(Q, Array.from({ length: 300 }, (_, i) => `item-${i}`));
    // A connected client (its channel resolved), as in a worker's loop; and a fresh one.
    const client = new SwitchyardClient(sy.address);
    await client.getQueue(Q);
    const fresh = new SwitchyardClient(sy.address);
    try {
      for (let i = 0; i < 100; i++) client.lease(Q, 3).cancel();
      for (let i = 0; i < 20; i++) fresh.lease(Q, 3).cancel();
      await expect.poll(async () => (await sy.app.queues.stats(Q)).leaseStreams, { timeout: 10_000 }).toBe(0);
      // Every item is back in the queue (a lease call in flight as the streams closed gives its items back too).
      await expect.poll(async () => [await redis.plain.llen(Q), await redis.plain.llen(`${Q}.processing`)]).toEqual([300, 0]);
    } finally {
      client.close();
      fresh.close();
    }
  });
});
