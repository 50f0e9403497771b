/**
 * Summarises an alloc-profile.mjs profile: MB sampled in all, the allocation
 * sites by bytes, and the heaviest call stacks (six frames, innermost last).
 *   node bench/diagnostics/alloc-summary.mjs /tmp/alloc-<pid>.json [TOP]
 */
import { readFileSync } from "node:fs";

const profile = JSON.parse(readFileSync(process.argv[2], "utf8"));
const top = Number(process.argv[3] ?? 25);
const bySite = new Map();
const byStack = new Map();
let total = 0;
function walk(node, stack) {
  const f = node.callFrame;
  const site = `${f.functionName || "(anonymous)"} ${f.url.split("/").slice(-2).join("/")}:${f.lineNumber + 1}`;
  const here = [...stack, site];
  if (node.selfSize > 0) {
    total += node.selfSize;
    bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
    const key = here.slice(-6).join(" > ");
    byStack.set(key, (byStack.get(key) ?? 0) + node.selfSize);
  }
  for (const child of node.children) walk(child, here);
}
walk(profile.head, []);
const mb = (n) => (n / 1e6).toFixed(2).padStart(8);
console.log(`sampled ${mb(total).trim()} MB`);
console.log("by site (MB):");
for (const [k, v] of [...bySite].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${mb(v)}  ${k}`);
console.log("by stack (MB):");
for (const [k, v] of [...byStack].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${mb(v)}  ${k}`);
