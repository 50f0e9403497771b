/**
 * A raw Redis consumer in a process of its own (row 12), kept for every round
 * as a user's consumer would be: for each request from the parent it BLMPOPs
 * the ready list, up to 1000 values a call, until it has `items` values or
 * Redis's clock passes `deadline`; then it sends back when each call answered
 * (ms on Redis's clock, with how many values it brought) and every value's item
 * id. Its own process, as the raw producer's (raw-producer.ts), so that what it
 * measures is when the movers made the items ready, not the pauses of the
 * bench's process, whose heap holds what every row before left; kept warm
 * across rounds, since a fresh process pops cold (bench/README.md, 6 December
 * 2026, night). Run by fork(): `process.argv[2]` is Redis's socket path; it
 * exits on "stop".
 */
import { Redis } from "ioredis";
import { decodeItem } from "../dist/queue/envelope.js";
import { redisClock } from "./lib.js";

/** What the parent asks for: a round's list, how many items, and until when (ms on Redis's clock). */
export interface ConsumeRequest {
  list: string;
  items: number;
  deadline: number;
}

/** What the consumer answers: [Redis ms when a call answered, values it brought] per call, and the ids popped. */
export interface Consumed {
  calls: [number, number][];
  ids: string[];
}

async function consume(redis: Redis, clock: () => number, req: ConsumeRequest): Promise<Consumed> {
  const values: Buffer[] = [];
  const calls: [number, number][] = [];
  while (values.length < req.items && clock() < req.deadline) {
    const got = (await redis.callBuffer("BLMPOP", "1", "1", req.list, "RIGHT", "COUNT", "1000")) as [Buffer, Buffer[]] | null;
    if (!got) continue;
    calls.push([clock(), got[1].length]);
    for (const value of got[1]) values.push(value);
  }
  // Decoded once the movers are done, so the calls above only read.
  return { calls, ids: values.map((value) => decodeItem(value).id) };
}

async function main(): Promise<void> {
  const redis = new Redis({ path: process.argv[2] });
  const clock = await redisClock(redis);
  process.on("message", (m: unknown) => {
    if (m === "stop") {
      redis.disconnect();
      process.exit(0);
    }
    consume(redis, clock, m as ConsumeRequest).then(
      (out) => process.send!(out),
      (err: unknown) => {
        process.stderr.write(`raw consumer: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
        process.exit(1);
      },
    );
  });
  process.send!("ready");
}

if (process.send) void main();
