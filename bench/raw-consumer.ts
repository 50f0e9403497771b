/**
 * A raw Redis consumer in a process of its own (row 12), kept for every round
 * as a user's consumer would be: for each request from the parent it BLMPOPs
 * the round's ready list, up to 1000 values a call, until it has `items` values
 * or this host's clock passes `deadline` (overrun by at most one call's 1 s
 * block); then it answers with the request's list, when each call answered
 * (`Date.now()`, with how many values it brought) and every value's item id.
 * Its own process, as the raw producer's is (raw-producer.ts), so that what it
 * measures is when the movers made the items ready, not the pauses of the
 * bench's process, whose heap holds what every row before left; kept across
 * rounds, since a fresh process pops cold (bench/README.md, 6 December 2026,
 * night). Run by fork(): `process.argv[2]` is Redis's socket path; it sends
 * "ready" once connected, and exits on "stop" or when the parent is gone.
 */
import { Redis } from "ioredis";
import { decodeItem } from "../dist/queue/envelope.js";

/** What the parent asks for: a round's list, how many items, and until when (`Date.now()` ms). */
export interface ConsumeRequest {
  list: string;
  items: number;
  deadline: number;
}

/** The answer: the request's list, [`Date.now()` when a call answered, values it brought] per call, and the ids popped. */
export interface Consumed {
  list: string;
  calls: [number, number][];
  ids: string[];
}

async function consume(redis: Redis, req: ConsumeRequest): Promise<Consumed> {
  const values: Buffer[] = [];
  const calls: [number, number][] = [];
  while (values.length < req.items && Date.now() < req.deadline) {
    const got = (await redis.callBuffer("BLMPOP", "1", "1", req.list, "RIGHT", "COUNT", "1000")) as [Buffer, Buffer[]] | null;
    if (!got) continue;
    calls.push([Date.now(), got[1].length]);
    for (const value of got[1]) values.push(value);
  }
  // Decoded once the movers are done, so the calls above only read.
  return { list: req.list, calls, ids: values.map((value) => decodeItem(value).id) };
}

function main(): void {
  const redis = new Redis({ path: process.argv[2] });
  process.on("disconnect", () => process.exit(0));
  process.on("message", (m: unknown) => {
    if (m === "stop") {
      redis.disconnect();
      process.exit(0);
    }
    consume(redis, m as ConsumeRequest).then(
      (out) => process.send!(out),
      (err: unknown) => {
        process.stderr.write(`raw consumer: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
        process.exit(1);
      },
    );
  });
  redis.ping().then(() => process.send!("ready"));
}

if (process.send) main();
