/** The reaper's view of a test process's children (test/helpers/reap-redis.ts, in every file's set-up). */
import { spawn } from "node:child_process";
import { expect, it } from "vitest";
import { startStandaloneRedis } from "../helpers/redis.js";
import { redisServerChildren } from "../helpers/reap-redis.js";

it.runIf(process.platform === "linux")("lists this process's running redis-server children and nothing else", async () => {
  const other = spawn("sleep", ["30"], { stdio: "ignore" });
  const redis = await startStandaloneRedis();
  try {
    const pid = redis.server.process.pid!;
    expect(redisServerChildren()).toEqual([pid]);
    expect(redisServerChildren(other.pid)).toEqual([]);
    await redis.stop();
    expect(redisServerChildren()).toEqual([]);
  } finally {
    other.kill("SIGKILL");
    await redis.stop();
  }
});
