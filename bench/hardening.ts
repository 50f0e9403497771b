/**
 * Rows 10 and 11 (issue 17): the server's peak RSS under two faults that used
 * to grow it without bound, each against its stated limit. The server runs as
 * a child process (`node dist/main.js`, bench/streams.ts) against its own
 * redis-server, so only its memory counts.
 *
 * - Row 10, a worker that never reads: one Lease stream with credit 2,000 on
 *   2,000 items of 100 KB, opened over plain HTTP/2 and never read. The items
 *   go straight into Redis (LPUSH of their envelopes), so the server only
 *   leases. Limit: the deliveries it holds for the stream stay within
 *   SWITCHYARD_LEASE_STREAM_BUFFER_BYTES (16 MiB) plus one delivery message
 *   (SWITCHYARD_LEASE_BATCH = 256 items, 25.6 MB here), and that message
 *   exists three times until the GC runs (Redis's reply, the encoded message,
 *   grpc-js's framed copy): RSS may grow by the bound, three batches and 25 MB.
 *   Delivery messages are sized (4 MiB for this worker, which announces no
 *   limit), but a lease batch is written at once, in as many messages as it
 *   takes, before the stream's bound is looked at again.
 * - Row 11, a 60 s blackhole: the server's Redis link goes through a proxy
 *   that stops carrying anything, under a fixed offered load of 25 unary
 *   Enqueue calls a second, 100 items of 1 KB each (2.5 MB/s), sent whether or
 *   not earlier calls have answered. Limit: what waits for Redis is at most the
 *   load of one command timeout (5 s × 2.5 MB/s = 12.5 MB; never more than
 *   SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES); RSS may grow by that and 25 MB.
 *
 * `npm run bench` runs both once (rows 10 and 11 of its diagnostics table);
 * alone: `npm run build && tsc -p bench/tsconfig.json && node dist-bench/hardening.js`,
 * or `node dist-bench/run.js --rows 10,11`.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Redis } from "ioredis";
import { startEmbeddedRedis, type EmbeddedRedis } from "../dist/redis/embedded.js";
import { SwitchyardClient } from "../dist/client/client.js";
import { QueueMode } from "../dist/gen/switchyard/v1/queue_pb.js";
import { encodeItem } from "../dist/queue/envelope.js";
import { defaults } from "../dist/config.js";
import { startServer } from "./streams.js";
import { rawLease, startProxy } from "./faults.js";
import { leftovers, log, sleep, waitFor, within } from "./lib.js";

const MB = 2 ** 20;
/** RSS a process may gain beyond the limit's bytes: allocator and heap slack. */
const SLACK_MB = 25;

/** One row's figures. */
export interface RssRow {
  /** Server RSS before the fault (MB): under the same load (row 11), its highest in the 10 s before. */
  baseMb: number;
  peakMb: number;
  /** The most `peakMb - baseMb` may be, by the limits that apply (MB). */
  limitMb: number;
  /** What the limit is made of, for the table. */
  limit: string;
  /** What happened meanwhile, for the notes. */
  detail: string;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : 0;
}

/** A redis-server on a unix socket and a Switchyard child against `url(socketPath)`; `stop` ends both. */
async function serverOn(url: (socketPath: string) => Promise<string>) {
  const dir = mkdtempSync(join(tmpdir(), "sy-bench-hardening-"));
  const redis: EmbeddedRedis = await startEmbeddedRedis({ dir, appendOnly: false });
  leftovers.add(redis.process);
  // Log level error: row 11 fails hundreds of calls on purpose, each a warning line.
  const { child, address } = await startServer(await url(redis.socketPath), [], { SWITCHYARD_LOG_LEVEL: "error" });
  leftovers.add(child);
  const plain = new Redis({ path: redis.socketPath });
  let peak = 0;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(child.pid!))), 100);
  return {
    address,
    plain,
    rss: () => rssMb(child.pid!),
    peak: () => peak,
    resetPeak: () => (peak = rssMb(child.pid!)),
    async stop() {
      clearInterval(sampler);
      child.kill("SIGKILL");
      plain.disconnect();
      await redis.stop();
      leftovers.delete(redis.process);
      leftovers.delete(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Row 10: a worker with credit 2,000 that never reads, on 2,000 items of 100 KB. */
export async function stuckConsumerRss(shape = { items: 2000, itemBytes: 100_000, credit: 2000 }): Promise<RssRow> {
  const server = await serverOn(async (path) => `unix://${path}`);
  const admin = new SwitchyardClient(server.address);
  const stuck = rawLease(server.address, { read: false });
  try {
    const q = "{stuck}";
    await admin.createQueue({ name: q, mode: QueueMode.RELIABLE });
    for (let i = 0; i < shape.items; i += 100) {
      const values = Array.from({ length: Math.min(100, shape.items - i) }, (_, j) => encodeItem(`stuck-${i + j}`, Buffer.alloc(shape.itemBytes, 120), {}, Date.now()));
      await server.plain.lpush(q, ...values);
    }
    await sleep(2000);
    const baseMb = server.rss();
    server.resetPeak();
    stuck.send({ case: "open", value: { queue: q, credit: shape.credit } });
    await waitFor(async () => (await server.plain.llen(`${q}.processing`)) > 0, 10_000, "the stuck stream's first deliveries");
    await sleep(5000); // it is given what it will be given
    const held = await server.plain.llen(`${q}.processing`);
    const batchBytes = defaults.leaseBatch * shape.itemBytes;
    const limitBytes = defaults.maxStreamBufferBytes + 3 * batchBytes;
    return {
      baseMb,
      peakMb: server.peak(),
      limitMb: limitBytes / MB + SLACK_MB,
      limit:
        `SWITCHYARD_LEASE_STREAM_BUFFER_BYTES (${defaults.maxStreamBufferBytes / MB} MiB) + 3 copies of one lease batch ` +
        `(${defaults.leaseBatch} × ${shape.itemBytes / 1000} KB) + ${SLACK_MB} MB`,
      detail: `held ${held} of ${shape.items} items (credit ${shape.credit})`,
    };
  } finally {
    stuck.close();
    admin.close();
    await server.stop();
  }
}

/** Row 11: a 60 s blackhole of the server's Redis link under 2.5 MB/s of offered enqueues. */
export async function blackholeRss(shape = { seconds: 60, callsPerSec: 25, itemsPerCall: 100, itemBytes: 1000 }): Promise<RssRow> {
  let proxy: Awaited<ReturnType<typeof startProxy>> | undefined;
  const server = await serverOn(async (path) => {
    proxy = await startProxy(`unix:${path}`);
    return `redis://${proxy.address}`;
  });
  const client = new SwitchyardClient(server.address, { enqueueStream: false, coalesceEnqueues: false, timeoutMs: 10_000 });
  const outcomes = new Map<string, number>();
  let slowestFailureMs = 0;
  let sending = true;
  const items = Array.from({ length: shape.itemsPerCall }, () => Buffer.alloc(shape.itemBytes, 120));
  const inFlight = new Set<Promise<void>>();
  try {
    await client.createQueue({ name: "{blackhole}", mode: QueueMode.RELIABLE });
    // An open loop: a call every 1/rate s, whether or not the ones before have answered.
    const loop = (async () => {
      for (let tick = 0; sending; tick++) {
        const started = Date.now();
        const call = client.enqueue("{blackhole}", items).then(
          () => void outcomes.set("OK", (outcomes.get("OK") ?? 0) + 1),
          (err: { code?: number }) => {
            const name = String(err.code ?? "error");
            outcomes.set(name, (outcomes.get(name) ?? 0) + 1);
            slowestFailureMs = Math.max(slowestFailureMs, Date.now() - started);
          },
        );
        inFlight.add(call);
        void call.finally(() => inFlight.delete(call));
        await sleep(1000 / shape.callsPerSec);
      }
    })();
    await sleep(5_000); // the load reaches its steady state
    // The base is the highest RSS of the next 10 s under the same load: the fault's peak is set against the
    // peak of the heap's usual rise and fall, not against one sample that may fall just after a collection.
    server.resetPeak();
    await sleep(10_000);
    const baseMb = server.peak();
    server.resetPeak();
    outcomes.clear();
    proxy!.blackhole();
    log(`blackhole for ${shape.seconds} s`);
    await sleep(shape.seconds * 1000);
    const during = new Map(outcomes);
    proxy!.restore();
    await sleep(5000);
    sending = false;
    await loop;
    await within(Promise.all([...inFlight]), 30_000, "the last enqueues to answer");
    const offeredBytesPerSec = shape.callsPerSec * shape.itemsPerCall * shape.itemBytes;
    const limitBytes = Math.min(defaults.maxPendingEnqueueBytes, offeredBytesPerSec * (defaults.redisCommandTimeoutMs / 1000));
    const names: Record<string, string> = { OK: "ok", "14": "UNAVAILABLE", "8": "RESOURCE_EXHAUSTED", "4": "DEADLINE_EXCEEDED" };
    return {
      baseMb,
      peakMb: server.peak(),
      limitMb: limitBytes / MB + SLACK_MB,
      limit:
        `the offered load of one command timeout (${defaults.redisCommandTimeoutMs / 1000} s × ${offeredBytesPerSec / 1e6} MB/s, ` +
        `capped by SWITCHYARD_MAX_PENDING_ENQUEUE_BYTES) + ${SLACK_MB} MB`,
      detail:
        `${shape.seconds} s blackhole; calls during it: ${[...during].map(([k, v]) => `${v} ${names[k] ?? k}`).join(", ")}; ` +
        `slowest failure ${slowestFailureMs} ms`,
    };
  } finally {
    sending = false;
    client.close();
    await server.stop();
    await proxy?.close();
  }
}

const fmt = (r: RssRow) =>
  `peak ${r.peakMb.toFixed(0)} MB from ${r.baseMb.toFixed(0)} MB (+${(r.peakMb - r.baseMb).toFixed(0)} MB; limit +${r.limitMb.toFixed(0)} MB: ` +
  `${r.peakMb - r.baseMb <= r.limitMb ? "met" : "MISSED"}); ${r.detail}`;

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const rows = process.argv[2] ?? "10,11";
  if (rows.includes("10")) log(`row 10, a worker that never reads: ${fmt(await stuckConsumerRss())}`);
  if (rows.includes("11")) log(`row 11, a 60 s blackhole: ${fmt(await blackholeRss())}`);
}
