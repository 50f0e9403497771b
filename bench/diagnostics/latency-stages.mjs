// Diagnostic: where the time of one enqueue→delivery goes (bench row 5 shape).
// Wraps domain methods to stamp each stage on this process's clock.
//   node bench/diagnostics/latency-stages.mjs [ITEMS]   (after npm run bench has built dist/ and dist-bench/)
import { performance } from "node:perf_hooks";
import { startBenchRedis, startBenchApp } from "../../dist-bench/env.js";
import { runWorker } from "../../dist/client/worker.js";
import { Queues } from "../../dist/queue/queues.js";
import { QueueDispatcher } from "../../dist/queue/dispatcher.js";
import { decodeItem } from "../../dist/queue/envelope.js";
import { QueueMode } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { payload, seqOf, sleep, percentile } from "../../dist-bench/lib.js";

const N = Number(process.argv[2] ?? 2000), RATE = 500;
const now = () => performance.now();
const st = { sent: [], srv: [], srvDone: [], dist: [], got: [] };
for (const k in st) st[k] = new Float64Array(N);
let cur = -1;
const origEnq = Queues.prototype.enqueueIds;
Queues.prototype.enqueueIds = function (q, items, ...rest) {
  const seq = seqOf(Array.isArray(items) ? items[0].payload : items.payload(0)); st.srv[seq] = now(); cur = seq;
  const p = origEnq.call(this, q, items, ...rest);
  p.then(() => (st.srvDone[seq] = now()));
  return p;
};
const origDist = QueueDispatcher.prototype.distribute;
QueueDispatcher.prototype.distribute = function (taken) {
  for (const t of taken) { const s = seqOf(decodeItem(t.value).payload); if (s >= 0 && s < N) { if (st.dist[s]) console.log('distributed twice', s, (now() - st.dist[s]).toFixed(1), 'ms apart; received', st.got[s] ? 'yes' : 'no'); st.dist[s] = now(); } }
  return origDist.call(this, taken);
};
const redis = await startBenchRedis();
const sy = await startBenchApp(redis.socketPath);
const name = "{diag}";
await sy.client.createQueue({ name, mode: QueueMode.RELIABLE, recoverySet: `${name}.claims`, minIdle: { seconds: 60n } });
let got = 0;
const w = runWorker({ client: sy.client, queue: name, concurrency: 10, handler: (d) => { st.got[seqOf(d.payload)] = now(); got++; } });
await sleep(200);
const t0 = now();
for (let i = 0; i < N; i++) {
  const wait = t0 + i * (1000 / RATE) - now();
  if (wait >= 1) await sleep(wait);
  st.sent[i] = now();
  void sy.client.enqueue(name, [payload(100, i)]);
}
while (got < N) await sleep(10);
await w.stop(); await sy.stop(); await redis.stop();
const show = (label, a, b) => {
  const xs = []; for (let i = 200; i < N; i++) xs.push(b[i] - a[i]);
  console.log(label.padEnd(28), "p50", percentile(xs, 50).toFixed(3), "p90", percentile(xs, 90).toFixed(3), "p99", percentile(xs, 99).toFixed(3));
};
show("client→server handler", st.sent, st.srv);
show("server handler→lease back", st.srv, st.dist);
show("lease back→client handler", st.dist, st.got);
show("server handler→push acked", st.srv, st.srvDone);
show("total", st.sent, st.got);
const idx = [...Array(N).keys()].slice(200).filter((i) => st.srv[i] > 0).sort((a, b) => (st.got[b] - st.sent[b]) - (st.got[a] - st.sent[a])).slice(0, 25);
for (const i of idx) console.log(i, "total", (st.got[i] - st.sent[i]).toFixed(2), "c→s", (st.srv[i] - st.sent[i]).toFixed(2), "s→lease", (st.dist[i] - st.srv[i]).toFixed(2), "lease→h", (st.got[i] - st.dist[i]).toFixed(2), "at", (st.sent[i] - st.sent[0]).toFixed(0));
