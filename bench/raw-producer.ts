/**
 * A raw Redis producer in a process of its own (row 12): LPUSH of a 100-byte
 * value back to back on one connection, each timed, until the parent sends
 * "stop"; then it sends back every push as [host ms when answered, latency ms]
 * and exits. Its own process, so what it measures is Redis's answer and not the
 * bench's event loop. Run by fork(): `process.argv[2]` is Redis's socket path,
 * `process.argv[3]` the key.
 */
import { Redis } from "ioredis";

const [socketPath, key] = process.argv.slice(2);
const redis = new Redis({ path: socketPath });
const value = Buffer.alloc(100, 120);
const pushes: [number, number][] = [];
let stopping = false;
process.on("message", (m) => {
  if (m === "stop") stopping = true;
});

async function main(): Promise<void> {
  process.send!("ready");
  for (let i = 0; !stopping && i < 10_000_000; i++) {
    const t0 = performance.now();
    await redis.lpush(key, value);
    pushes.push([Date.now(), performance.now() - t0]);
    if (i % 1000 === 999) await redis.del(key);
  }
  await redis.del(key);
  redis.disconnect();
  process.send!({ pushes }, undefined, {}, () => process.exit(0));
}

void main();
