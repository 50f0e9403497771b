/** Where scenario results go, and their shape (read by the final table). */
import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";

export const ARTIFACTS = resolve(import.meta.dirname, "../../..", "test-artifacts", "chaos");
export const RESULTS = join(ARTIFACTS, "results");

/** One scenario's outcome, as the final table shows it. */
export interface ScenarioResult {
  id: string;
  title: string;
  pass: boolean;
  lost?: number;
  duplicates?: number;
  /** Fault to service (or items) back, ms. */
  recoveryMs?: number;
  /** Items left in a processing list with no holder once everything settled. */
  stranded?: number;
  /** Fault to the first call failing (ms); the slowest failed call is in the notes. */
  failMs?: number;
  /** gRPC health as a Watch saw it, e.g. "SERVING → NOT_SERVING +1.2 s → SERVING +11.4 s". */
  health?: string;
  /** Highest resident set size of the server process, MB. */
  peakRssMb?: number;
  notes: string[];
  checks: { name: string; ok: boolean; detail?: string }[];
  figures: Record<string, unknown>;
  durationMs: number;
}

/** Removes the previous run's results. */
export function clearResults(): void {
  mkdirSync(RESULTS, { recursive: true });
  for (const f of readdirSync(RESULTS)) rmSync(join(RESULTS, f), { force: true });
}
