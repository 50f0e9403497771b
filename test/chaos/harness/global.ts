/**
 * globalSetup of the chaos suite: clears the previous results before the run,
 * and after it prints the table of every scenario's figures (lost, duplicates,
 * stranded, recovery time, time to fail calls, gRPC health transitions, peak
 * server RSS) from test-artifacts/chaos/results/*.json, and writes it to
 * test-artifacts/chaos/summary.md.
 */
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ARTIFACTS, RESULTS, clearResults, type ScenarioResult } from "./results.js";

export function setup(): void {
  clearResults();
  rmSync(join(ARTIFACTS, "logs"), { recursive: true, force: true });
}

const cell = (v: unknown) => (v === undefined || v === null ? "–" : String(v));

export function teardown(): void {
  const files = existsSync(RESULTS) ? readdirSync(RESULTS).filter((f) => f.endsWith(".json")).sort() : [];
  const results = files.map((f) => JSON.parse(readFileSync(join(RESULTS, f), "utf8")) as ScenarioResult);
  const rows = results.map((r) => [
    r.id,
    r.title,
    r.pass ? "pass" : "FAIL",
    cell(r.lost),
    cell(r.duplicates),
    cell(r.stranded),
    r.recoveryMs === undefined ? "–" : `${Math.round(r.recoveryMs)} ms`,
    r.failMs === undefined ? "–" : `${Math.round(r.failMs)} ms`,
    cell(r.health),
    r.peakRssMb === undefined ? "–" : `${Math.round(r.peakRssMb)} MB`,
    `${(r.durationMs / 1000).toFixed(1)} s`,
    r.pass ? r.notes.join("; ") : [...r.checks.filter((c) => !c.ok).map((c) => `✗ ${c.name}${c.detail ? ` (${c.detail.slice(0, 160)})` : ""}`), ...r.notes].join("; "),
  ]);
  const header = ["#", "scenario", "result", "lost", "dup", "stranded", "recovery", "calls fail", "gRPC health", "peak RSS", "time", "notes"];
  const last = header.length - 1;
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (i === last ? 0 : r[i].length))));
  const line = (r: string[]) => r.map((c, i) => (i === last ? c : c.padEnd(widths[i]))).join("  ");
  const table = [line(header), line(widths.map((w, i) => "-".repeat(i === last ? 5 : w))), ...rows.map(line)].join("\n");
  const md = [
    "| " + header.join(" | ") + " |",
    "|" + header.map(() => "---").join("|") + "|",
    ...rows.map((r) => "| " + r.map((c) => c.replace(/\|/g, "\\|")).join(" | ") + " |"),
  ].join("\n");
  writeFileSync(join(ARTIFACTS, "summary.md"), md + "\n");
  process.stdout.write(`\nChaos suite: figures per scenario (test-artifacts/chaos/summary.md)\n${table}\n\n`);
}
