/**
 * Sums V8's --trace-gc-nvp lines per process over the last WINDOW ms of each
 * (default 6000: the last slices of the 500/s latency row, when it is the last thing run): how
 * many scavenges, the bytes they promoted and copied, their pauses, and the
 * mark-compacts. Promoted bytes are steadier from run to run than pauses.
 *   rm -f /tmp/gc.txt; BENCH_SERVER_STDOUT=/tmp/gc.txt node dist-bench/run.js --rows latency \
 *     --rounds 1 --only switchyard --server-node-args --trace-gc-nvp \
 *     --agent-node-args --trace-gc-nvp --out /tmp/x.md > /tmp/agents.txt
 *   node bench/diagnostics/gc-summary.mjs /tmp/gc.txt /tmp/agents.txt [WINDOW]
 * (the server's lines in the first file, the producer's and workers' in the second).
 */
import { readFileSync } from "node:fs";

const args = process.argv.slice(2);
const windowMs = /^\d+$/.test(args.at(-1) ?? "") ? Number(args.pop()) : 6000;
const byPid = new Map();
for (const file of args) {
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const m = /^\[(\d+):\S+\]\s+(\d+) ms: (.*)$/.exec(line);
    if (!m || !m[3].includes("gc=")) continue;
    const fields = Object.fromEntries(m[3].split(" ").filter((f) => f.includes("=")).map((f) => f.split("=")));
    const list = byPid.get(m[1]) ?? [];
    list.push({ at: Number(m[2]), ...fields });
    byPid.set(m[1], list);
  }
}
const mb = (n) => (n / 1e6).toFixed(2);
const median = (xs) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : NaN);
for (const [pid, list] of byPid) {
  const end = list.at(-1).at;
  const recent = list.filter((g) => g.at >= end - windowMs);
  const scavenges = recent.filter((g) => g.gc === "s");
  const full = recent.filter((g) => g.gc !== "s");
  const promoted = scavenges.reduce((n, g) => n + Number(g.promoted ?? 0), 0);
  const copied = scavenges.reduce((n, g) => n + Number(g.new_space_survived ?? 0), 0);
  const pauses = scavenges.map((g) => Number(g.pause));
  console.log(
    `pid ${pid} (${list.length} GCs in all), last ${windowMs} ms: ${scavenges.length} scavenges, promoted ${mb(promoted)} MB, copied ${mb(copied)} MB, ` +
      `pause median ${median(pauses)} max ${Math.max(...pauses)} ms; ${full.length} mark-compacts (${full.map((g) => g.pause).join(", ") || "-"} ms)`,
  );
}
