/**
 * Log lines never carry a failed Redis command's arguments: ioredis puts the
 * command on its errors (`command: { name, args }`), and the args are items'
 * payloads (a push) or a script's whole text (an EVAL after NOSCRIPT: a
 * 37,846-character warning was seen). Logs must not hold payloads (log.ts).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { createLogger } from "../../src/log.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

let redis: StandaloneRedis;
beforeAll(async () => {
  redis = await startStandaloneRedis();
});
afterAll(() => redis?.stop());

it("logs a Redis error's command by name and count of arguments, as `err` or any other field, and leaves the error as it was", async () => {
  await redis.plain.set("{logged}", "not a list");
  const err = await redis.plain.lpush("{logged}", "secret payload one", Buffer.from("secret payload two")).then(
    () => undefined,
    (e: Error & { command?: { name: string; args: unknown[] } }) => e,
  );
  expect(err?.command?.args).toHaveLength(3); // what ioredis attaches (the key, then the values)
  const lines: string[] = [];
  const log = createLogger("info", (l) => void lines.push(l));
  log.warn("a push failed", { err });
  log.warn("a push failed, under another name", { failure: err, queue: "{logged}" });
  log.error("wrapped", { err: new Error("the enqueue failed", { cause: err }) });
  expect(lines).toHaveLength(3);
  for (const line of lines) expect(line).not.toContain("secret");
  const [first, second] = lines.map((l) => JSON.parse(l) as Record<string, { message: string; command: unknown }>);
  expect([first.err.message, first.err.command]).toEqual([expect.stringContaining("WRONGTYPE"), { name: "lpush", args: "3 not logged" }]);
  expect(second.failure.command).toEqual({ name: "lpush", args: "3 not logged" });
  expect(err?.command?.args).toHaveLength(3);
});
