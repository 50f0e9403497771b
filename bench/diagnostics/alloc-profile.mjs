/**
 * Preload (`--import`) for a Node process: V8's sampling heap profiler over
 * every allocation, those the GC has already collected included, written as
 * JSON to $ALLOC_PROFILE_DIR (default the temp dir) as alloc-<pid>.json when
 * the process ends (SIGTERM or exit). Where a process's young-generation GCs
 * come from; summarise with alloc-summary.mjs. For the server of the deployed
 * rows:
 *   node dist-bench/run.js --rows latency --rounds 1 --only switchyard \
 *     --server-node-args "--import ./bench/diagnostics/alloc-profile.mjs"
 * With ALLOC_PROFILE_SURVIVORS=1 the objects a scavenge collected are left out:
 * what remains outlived a young-generation GC (promoted, or still alive at the
 * end), the objects that make scavenges slow and feed mark-compacts.
 */
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const session = new Session();
session.connect();
const post = (method, params = {}) => new Promise((ok, fail) => session.post(method, params, (err, r) => (err ? fail(err) : ok(r))));
await post("HeapProfiler.enable");
await post("HeapProfiler.startSampling", { samplingInterval: 8192, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: process.env.ALLOC_PROFILE_SURVIVORS !== "1" });

let written = false;
function write() {
  if (written) return;
  written = true;
  // Synchronous in the inspector's own session, so it lands before an exit.
  session.post("HeapProfiler.stopSampling", {}, (err, r) => {
    if (!err) writeFileSync(join(process.env.ALLOC_PROFILE_DIR ?? tmpdir(), `alloc-${process.pid}.json`), JSON.stringify(r.profile));
  });
}
process.prependListener("SIGTERM", write);
process.on("exit", write);
