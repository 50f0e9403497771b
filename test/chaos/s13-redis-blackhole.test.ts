/**
 * Scenario 13: the link to Redis blackholed (TCP open, nothing carried) for
 * 15 s under load, through a proxy between the server and Redis. Must hold
 * (harness/redis-fault.ts): calls fail with UNAVAILABLE within the command
 * timeout (5 s, the default) and none waits longer; gRPC health turns
 * NOT_SERVING within 3 s and back once the link is; the server's RSS stays
 * bounded; afterwards every acknowledged item is delivered (0 lost) and none
 * is left stranded in processing.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { Scenario } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, type ChaosRedis } from "./harness/procs.js";
import { redisFaultUnderLoad } from "./harness/redis-fault.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";

const s = new Scenario("13", "Redis link blackholed 15 s under load");
let redis: ChaosRedis | undefined;
let proxy: TcpProxy | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  proxy?.restore();
  await proxy?.close();
  await redis?.stop();
});

it("a blackholed Redis fails calls within the command timeout, health follows, memory stays bounded, and nothing is lost or stranded", () =>
  s.run(async () => {
    redis = await startChaosRedis({ aof: true });
    const link = (proxy = await startProxy(`unix:${redis.socketPath}`));
    const server = await startServer("s13-A", { url: `redis://${link.address}` });
    client = new SwitchyardClient(server.address, { timeoutMs: 30_000 });
    await redisFaultUnderLoad(s, redis, server, client, {
      name: "blackhole",
      faultMs: 15_000,
      start: () => link.blackhole(),
      end: () => link.restore(),
    });
  }));
