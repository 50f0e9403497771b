/** Rounds of a benchmark run: per-round samples by metric, and the rotating order systems run in. */
import { log, median } from "./lib.js";

export class Rounds {
  /** Per-round samples by metric name. */
  readonly samples = new Map<string, number[]>();

  constructor(
    readonly rounds: number,
    /** Runs only the systems whose label starts with this (e.g. "switchyard"). */
    private readonly only?: string,
  ) {}

  record(metric: string, value: number): void {
    if (!this.samples.has(metric)) this.samples.set(metric, []);
    this.samples.get(metric)!.push(value);
  }

  /** The median of a metric's rounds (NaN when it was not measured). */
  med(metric: string): number {
    return this.samples.has(metric) ? median(this.samples.get(metric)!) : NaN;
  }

  has(metric: string): boolean {
    return this.samples.has(metric);
  }

  /** Runs `systems` in an order that rotates per round, so no system always goes first. */
  async interleaved(row: string, systems: [string, () => Promise<void>][]): Promise<void> {
    for (let round = 0; round < this.rounds; round++) {
      const order = systems.map((_, i) => systems[(i + round) % systems.length]).filter(([name]) => !this.only || name.startsWith(this.only));
      for (const [name, run] of order) {
        const t0 = Date.now();
        await run();
        log(`row ${row} round ${round + 1}: ${name} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
  }
}
