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
      const order = systems.map((_, i) => systems[(i + Math.max(round, 0)) % systems.length]).filter(([name]) => this.runs(name));
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

  /**
   * interleaved(), for rows whose measure is a spread of samples (latency percentiles): within each
   * round the systems take turns in `slices` short runs, and each system's `done` gets its samples of
   * the round pooled. A round of one run per system put each system's tail on its own ten seconds of a
   * shared host, whose slow spells come and go over seconds (bench/README.md, 6 December, evening);
   * slices put those spells on every system alike. The slices' orders are the rows of a balanced Latin
   * square (turnOrders): with as many slices as systems, each system runs once in each place of a
   * round and right after each other system once, so none always follows the same neighbour and
   * meets what that one's processes leave behind. With `warm`, one slice first that is not recorded.
   */
  async sliced(
    row: string,
    systems: [string, () => Promise<number[]>, (pooled: number[]) => void][],
    slices: number,
    options: { warm?: boolean } = {},
  ): Promise<void> {
    const runs = systems.filter(([name]) => this.runs(name));
    const orders = turnOrders(runs.length);
    let turn = 0;
    for (let round = options.warm ? -1 : 0; round < this.rounds; round++) {
      this.warming = round < 0;
      try {
        const t0 = Date.now();
        const pooled = runs.map((): number[] => []);
        for (let slice = 0; slice < (round < 0 ? 1 : slices); slice++) {
          for (const k of orders[turn++ % orders.length]) for (const x of await runs[k][1]()) pooled[k].push(x);
        }
        runs.forEach(([, , done], k) => done(pooled[k]));
        log(`row ${row} ${round < 0 ? "warm pass" : `round ${round + 1}`}: ${runs.length} systems in ${round < 0 ? 1 : slices} slices done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      } finally {
        this.warming = false;
      }
    }
  }

  /** Whether `name`'s system runs (see `only`). */
  private runs(name: string): boolean {
    return !this.only || name.startsWith(this.only);
  }
}

/**
 * Orders for `n` systems taking turns: the rows of a balanced (Williams) Latin square. Each system
 * takes each place once over the rows, and follows each other system once (n even; for n odd, the
 * n rows and their reverses, 2n in all, follow each other twice).
 */
export function turnOrders(n: number): number[][] {
  const first: number[] = [];
  for (let i = 0, lo = 0, hi = n - 1; i < n; i++) first.push(i % 2 === 0 ? lo++ : hi--);
  const rows = first.map((_, r) => first.map((x) => (x + r) % n));
  return n % 2 === 0 ? rows : [...rows, ...rows.map((row) => [...row].reverse())];
}
