#!/usr/bin/env node
/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`): the top functions by
 * self time, and by package/area (project src, grpc-js, protobuf-es, ioredis,
 * bullmq, node internals, GC, idle).
 *
 *   node bench/profile-summary.mjs PROFILE.cpuprofile [top=25] [--callers FUNCTION_NAME]
 *
 * With --callers, also prints the call stacks (5 frames up) that lead to the
 * named function, by the self time spent in it.
 */
import { readFileSync } from "node:fs";

const args = process.argv.slice(2);
const callersOf = args.includes("--callers") ? args.splice(args.indexOf("--callers"), 2)[1] : undefined;
const [file, topArg] = args;
if (!file) {
  console.error("usage: node bench/profile-summary.mjs PROFILE.cpuprofile [top]");
  process.exit(2);
}
const top = Number(topArg ?? 25);
const prof = JSON.parse(readFileSync(file, "utf8"));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map();
// timeDeltas[i] is the time before samples[i]
for (let i = 0; i < prof.samples.length; i++) {
  const id = prof.samples[i];
  self.set(id, (self.get(id) ?? 0) + (prof.timeDeltas[i] ?? 0));
}
const total = [...self.values()].reduce((a, b) => a + b, 0);

function area(url, name) {
  if (name === "(garbage collector)") return "GC";
  if (name === "(idle)") return "idle";
  if (name === "(program)") return "(program: native, not attributed)";
  if (!url) return "native/builtin";
  if (url.includes("/dist/") && !url.includes("node_modules")) return "switchyard " + url.replace(/.*\/dist\//, "dist/").replace(/\/[^/]*$/, "/");
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1];
  if (url.startsWith("node:")) return "node internals";
  return url.replace(/.*\//, "");
}

const fns = new Map();
const areas = new Map();
for (const [id, us] of self) {
  const n = byId.get(id);
  const cf = n.callFrame;
  const short = cf.url ? cf.url.replace(/.*node_modules\//, "").replace(/.*\/(dist|dist-bench)\//, "$1/") : "";
  const key = `${cf.functionName || "(anonymous)"}  ${short}${cf.url ? `:${cf.lineNumber + 1}` : ""}`;
  fns.set(key, (fns.get(key) ?? 0) + us);
  const a = area(cf.url, cf.functionName);
  areas.set(a, (areas.get(a) ?? 0) + us);
}
const pct = (us) => `${((us / total) * 100).toFixed(1).padStart(5)}%`;
console.log(`profile ${file}: ${(total / 1e6).toFixed(2)} s sampled`);
console.log("\n-- by area (self time) --");
for (const [k, us] of [...areas].sort((a, b) => b[1] - a[1]).slice(0, 20)) console.log(`${pct(us)}  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`);
console.log(`\n-- top ${top} functions (self time) --`);
for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(us)}  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`);

if (callersOf) {
  const parent = new Map();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stacks = new Map();
  for (const [id, us] of self) {
    const n = byId.get(id);
    if (n.callFrame.functionName !== callersOf) continue;
    const frames = [];
    for (let p = parent.get(id), k = 0; p !== undefined && k < 5; p = parent.get(p), k++) {
      const cf = byId.get(p).callFrame;
      frames.push(`${cf.functionName || "(anon)"}@${cf.url.replace(/.*\//, "")}:${cf.lineNumber + 1}`);
    }
    const key = frames.join(" < ");
    stacks.set(key, (stacks.get(key) ?? 0) + us);
  }
  console.log(`\n-- callers of ${callersOf} --`);
  for (const [k, us] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 10)) console.log(`${pct(us)}  ${k}`);
}
