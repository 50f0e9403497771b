// Issue 17: what holds a server's RSS after rounds of Lease streams opened and closed. A child
// `node dist/main.js` (its own redis-server); each round opens and closes 5,000 streams, 100 at a
// time; after each round, the child's RSS (/proc) and its V8 heap (its /metrics). Run after
// `npm run build`:
//   node bench/diagnostics/lease-churn-rss.mjs [rounds=3] [extra env as JSON]
// At eafbcbb each closed stream stayed referenced by its heartbeat timer for 15 s (the heap
// grew 72 → 115 → 164 MB over three rounds, RSS 98 → 273 MB); now the timer is cancelled on close.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { startEmbeddedRedis } from "../../dist/redis/embedded.js";
import { SwitchyardClient } from "../../dist/client/client.js";

const rounds = Number(process.argv[2] ?? 3);
const dir = mkdtempSync(join(tmpdir(), "sy-churn-"));
const redis = await startEmbeddedRedis({ dir, appendOnly: false });
const env = {
  ...process.env,
  SWITCHYARD_REDIS_URL: `unix://${redis.socketPath}`,
  SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0",
  SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0",
  SWITCHYARD_AUTH: "off",
  SWITCHYARD_LOG_LEVEL: "error",
  ...JSON.parse(process.argv[3] ?? "{}"),
};
const child = spawn(process.execPath, ["dist/main.js"], { env, stdio: ["ignore", "pipe", "inherit"] });
let http;
const address = await new Promise((ok) =>
  createInterface({ input: child.stdout }).on("line", (l) => {
    const m = /listening on (\S+)/.exec(l);
    if (m) ok(m[1]);
    const h = /metrics on http:\/\/(\S+)\/metrics/.exec(l);
    if (h) http = h[1];
  }),
);
const rssMb = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))[1]) / 1024;
const heap = async () => {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const mb = (name) => (Number(new RegExp(`^${name} (\\S+)`, "m").exec(text)?.[1]) / 2 ** 20).toFixed(0);
  return `heap used ${mb("nodejs_heap_size_used_bytes")} MB of ${mb("nodejs_heap_size_total_bytes")} MB, external ${mb("nodejs_external_memory_bytes")} MB`;
};
const client = new SwitchyardClient(address);
await client.createQueue({ name: "{churn}", mode: 2 });
await new Promise((r) => setTimeout(r, 500));
console.log(`start: RSS ${rssMb().toFixed(0)} MB, ${await heap()}`);
for (let round = 1; round <= rounds; round++) {
  for (let batch = 0; batch < 50; batch++) {
    const sessions = Array.from({ length: 100 }, () => client.lease("{churn}", 10));
    await Promise.all(sessions.map((s) => s.opened));
    await Promise.all(sessions.map((s) => s.close()));
  }
  await new Promise((r) => setTimeout(r, 2000));
  console.log(`round ${round} (5,000 streams): RSS ${rssMb().toFixed(0)} MB, ${await heap()}`);
}
client.close();
child.kill("SIGKILL");
await redis.stop();
rmSync(dir, { recursive: true, force: true });
