/**
 * Scenario 14: Redis paused (CLIENT PAUSE 10 s ALL: connections up, nothing
 * answered) under load. Must hold (harness/redis-fault.ts): calls fail with
 * UNAVAILABLE within the command timeout (5 s) instead of waiting out the
 * pause; gRPC health turns NOT_SERVING within 3 s and SERVING once Redis
 * answers; memory bounded; afterwards 0 lost and 0 stranded.
 */
import { afterAll, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { Scenario } from "./harness/ledger.js";
import { killStarted, startChaosRedis, startServer, type ChaosRedis } from "./harness/procs.js";
import { redisFaultUnderLoad } from "./harness/redis-fault.js";

const PAUSE_MS = 10_000;

const s = new Scenario("14", "Redis paused 10 s (CLIENT PAUSE ALL)");
let redis: ChaosRedis | undefined;
let client: SwitchyardClient | undefined;

afterAll(async () => {
  killStarted();
  client?.close();
  await redis?.stop();
});

it("a paused Redis fails calls within the command timeout, health follows it down and up, and nothing is lost or stranded", () =>
  s.run(async () => {
    const paused = (redis = await startChaosRedis({ aof: true }));
    const server = await startServer("s14-A", paused);
    client = new SwitchyardClient(server.address, { timeoutMs: 30_000 });
    await redisFaultUnderLoad(s, paused, server, client, {
      name: "pause",
      faultMs: PAUSE_MS,
      start: async () => void (await paused.plain.call("CLIENT", "PAUSE", String(PAUSE_MS), "ALL")),
      end: () => undefined, // it ends by itself
    });
  }));
