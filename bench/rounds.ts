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

  /** True during a warm pass: what it measures is not recorded. */
  private warming = false;

  record(metric: string, value: number): void {
    if (this.warming) return;
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

  /**
   * Runs `systems` in an order that rotates per round, so no system always goes first.
   * With `warm`, a pass in round 1's order comes first and is not recorded: the first pass
   * of a row's shapes after the warm-up read slower (Switchyard's serial enqueue was lowest
   * in round 1 in 11 of the 12 full runs to 5 December, often by about half; a second pass
   * right after read as rounds 2 and 3; bench/README.md, 5 December, noon).
   */
  async interleaved(row: string, systems: [string, () => Promise<void>][], options: { warm?: boolean } = {}): Promise<void> {
    for (let round = options.warm ? -1 : 0; round < this.rounds; round++) {
      const order = systems.map((_, i) => systems[(i + Math.max(round, 0)) % systems.length]).filter(([name]) => !this.only || name.startsWith(this.only));
      this.warming = round < 0;
      try {
        for (const [name, run] of order) {
          const t0 = Date.now();
          await run();
          log(`row ${row} ${round < 0 ? "warm pass" : `round ${round + 1}`}: ${name} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
        }
      } finally {
        this.warming = false;
      }
    }
  }
}
