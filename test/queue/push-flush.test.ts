/**
 * A push that carries a lease (push-lease.lua) hands the items it took to
 * their streams, and only then answers its caller, once the event loop's
 * check phase has run: that is where Node's http2 writes a session's frames,
 * so a delivery leaves before the pusher's own work goes on (its Enqueue's
 * answer), not after it. The sink here stands for the transport: it "writes"
 * in a setImmediate of its own, as http2 does in its native immediate.
 */
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock.js";
import { createLogger } from "../../src/log.js";
import { BulkStrings } from "../../src/redis/bulk-strings.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { QueueDispatcher } from "../../src/queue/dispatcher.js";
import { LeaseStream, type Delivery } from "../../src/queue/lease-stream.js";
import { testDispatchHost, useDispatchRedis } from "../helpers/dispatch.js";

const log = createLogger("error");
const t = useDispatchRedis(log);

describe("a push whose lease took items", () => {
  it("resolves after the check phase in which the transport writes their deliveries", async () => {
    const clock = new ManualClock();
    const config = validateQueueSpec({ name: "{push-flush}", mode: "reliable" }, clock.now());
    const dispatcher = new QueueDispatcher(config, testDispatchHost(t.conn, clock, log));
    const events: string[] = [];
    const sink = {
      deliver: (batch: Delivery[]) => {
        const payloads = batch.map((d) => Buffer.from(d.item.payload).toString()).join(",");
        events.push(`handed ${payloads}`);
        setImmediate(() => events.push(`written ${payloads}`));
        return true;
      },
      heartbeat() {}, fail() {}, drain() {}, end() {},
    };
    dispatcher.add(new LeaseStream(config, 5, sink, clock.now()));
    try {
      // The pump found the queue empty and waits on its blocking read: a push now carries the lease.
      await expect.poll(() => (dispatcher as unknown as { wake?: unknown }).wake !== undefined).toBe(true);
      const length = await dispatcher.push(0, [BulkStrings.of([Buffer.from("a"), Buffer.from("b")])]);
      events.push("push answered");
      expect(length).toBe(2);
      expect(events).toEqual(["handed a,b", "written a,b", "push answered"]);
      expect(await t.redis.plain.llen(config.name)).toBe(0);
    } finally {
      dispatcher.close();
    }
  });
});
