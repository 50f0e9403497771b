/**
 * A short Redis outage as a lease stream ends (issue 17, Broken 4): the stream's
 * unsettled items cannot go back while Redis is down, and on a queue without a
 * recovery set nothing else would ever return them. The server keeps trying
 * (queue/returns.ts) until Redis takes them. Redis is "down" through a proxy
 * this file starts: every connection to it reset, and every new one, for about
 * 3 s. On eafbcbb all 20 stayed in processing after Redis was back.
 */
import { afterEach, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";

let redis: StandaloneRedis | undefined;
let proxy: TcpProxy | undefined;
let sy: TestSwitchyard | undefined;

afterEach(async () => {
  proxy?.restore();
  await sy?.stop();
  await proxy?.close();
  await redis?.stop();
  sy = redis = proxy = undefined;
});

it("a stream holding 20 items ends while Redis is down ~3 s: once Redis is back, all 20 are in the queue again, none in processing", async () => {
  const lines: string[] = [];
  redis = await startStandaloneRedis();
  proxy = await startProxy(`unix:${redis.socketPath}`);
  sy = await startSwitchyard(redis, {
    config: { redis: { kind: "standalone", url: `redis://${proxy.address}` } },
    log: createLogger("warn", (line) => void lines.push(line)),
  });
  const Q = "{outage}";
  await sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  expect((await sy.client.getQueue(Q)).recoverySet).toBe("");
  await sy.client.enqueue(Q, Array.from({ length: 20 }, (_, i) => `item-${i}`));
  const session = sy.client.lease(Q, 20);
  const held = await session.take(20);
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(20);

  proxy.down();
  // The stream ends while Redis is down: its items cannot go back now.
  await session.close();
  // Redis stays down while the server fails to return them, six attempts (about 3 s of backoff from 100 ms).
  const failedReturns = () => lines.filter((l) => l.includes("could not return")).length;
  await expect.poll(failedReturns, { timeout: 10_000 }).toBeGreaterThanOrEqual(6);
  expect(await redis.plain.llen(`${Q}.processing`)).toBe(20);

  proxy.restore();
  await expect
    .poll(async () => [await redis!.plain.llen(Q), await redis!.plain.llen(`${Q}.processing`)], { timeout: 15_000 })
    .toEqual([20, 0]);
  // Back in their order, each counted as delivered once.
  const again = sy.client.lease(Q, 20);
  const redelivered = await again.take(20);
  expect(redelivered.map((d) => Buffer.from(d.payload).toString())).toEqual(held.map((d) => Buffer.from(d.payload).toString()));
  expect(redelivered.every((d) => d.deliveryCount === 2)).toBe(true);
  await again.close();
});
