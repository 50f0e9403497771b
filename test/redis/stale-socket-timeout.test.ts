/**
 * A connection that drops with a command out must not bring the next one down.
 *
 * ioredis (5.11) arms its socketTimeout once per client and clears it only
 * when data comes; a connection reset with a command unanswered left the timer
 * armed, and when it fired it destroyed the connection made since, healthy or
 * not, failing the calls that one had out (ioredis issue 2147). The model tests
 * met it as a settle refused "redis is unavailable" exactly one command
 * timeout after a cut of the same instance.
 */
import { afterEach, expect, it } from "vitest";
import type { Redis } from "ioredis";
import { createLogger } from "../../src/log.js";
import { connectRedis, type RedisConnection } from "../../src/redis/connection.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { startLink, type Link } from "../helpers/link.js";

const COMMAND_TIMEOUT_MS = 300;

let redis: StandaloneRedis | undefined;
let link: Link | undefined;
let conn: RedisConnection | undefined;

afterEach(async () => {
  await conn?.close();
  await link?.close();
  await redis?.stop();
  conn = link = redis = undefined;
});

async function connect(): Promise<RedisConnection> {
  redis = await startStandaloneRedis();
  link = await startLink(redis.socketPath);
  conn = await connectRedis({ kind: "standalone", url: `redis://${link.address}` }, createLogger("silent"), {
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    keepAliveMs: 10_000,
    longestBlockMs: 500,
  });
  return conn;
}

/**
 * Cuts `client`'s connection while a command waits for its answer, waits for the next
 * connection, then keeps it busy past the first command's deadline (twice the connection's
 * socketTimeout on): resolves to the times that next connection closed, and the pings that failed.
 */
async function cutWithCommandOut(client: Redis, match: string): Promise<{ closes: number; failed: unknown[] }> {
  const held = link!.hold((chunk) => chunk.includes(match));
  const out = client.echo(match).catch(() => undefined);
  await held;
  const deadline = Date.now() + 2 * client.options.socketTimeout!;
  const back = new Promise((ok) => client.once("ready", ok));
  link!.cut();
  await out;
  await back;
  let closes = 0;
  client.on("close", () => closes++);
  const failed: unknown[] = [];
  // Bounded: the pings run until a fixed deadline, each answered at once by a healthy connection.
  while (Date.now() < deadline) {
    await client.ping().catch((err: unknown) => failed.push(err));
    await new Promise((ok) => setTimeout(ok, 10));
  }
  return { closes, failed };
}

it("the command connection made after a cut is not dropped when the dead one's command timeout comes due", async () => {
  const { client } = await connect();
  const { closes, failed } = await cutWithCommandOut(client as Redis, "held-on-the-command-connection");
  expect(failed).toEqual([]);
  expect(closes).toBe(0);
});

it("the connection made after a cut still drops itself when Redis stops answering it", async () => {
  const { client } = await connect();
  const redisClient = client as Redis;
  await cutWithCommandOut(redisClient, "held-before-the-silence");
  // Everything the next connection sends from now on stays in the link: no answer comes.
  const silent = link!.hold((chunk) => chunk.includes("unanswered"));
  const closed = new Promise<number>((ok) => redisClient.once("close", () => ok(Date.now())));
  const sent = Date.now();
  const out = redisClient.echo("unanswered").catch((err: unknown) => err);
  await silent;
  expect(await out).toBeInstanceOf(Error);
  // Dropped by its own socket timeout (the command's timeout fails the call first, at the same bound).
  expect((await closed) - sent).toBeLessThan(COMMAND_TIMEOUT_MS + 1000);
});

it("a blocking reader's connection made after a cut is not dropped when the dead one's silence limit comes due", async () => {
  const { duplicate } = await connect();
  const reader = (await duplicate()) as Redis;
  const { closes, failed } = await cutWithCommandOut(reader, "held-on-a-reader");
  expect(failed).toEqual([]);
  expect(closes).toBe(0);
});
