import { describe, expect, it, vi } from "vitest";
import { Rounds, turnOrders } from "../../bench/rounds.js";

vi.spyOn(process.stderr, "write").mockImplementation(() => true); // the rounds' progress lines

type Sliced = [string, () => Promise<number[]>, (pooled: number[]) => void];

/**
 * Systems that log each run as "name:run" and return two samples naming both: system i's run n
 * gives (i + 1) * 100 + n * 10 and that + 1.
 */
function systems(names: string[], log: string[], done: (name: string, pooled: number[]) => void = () => undefined): Sliced[] {
  const counts = new Map<string, number>();
  return names.map((name, i): Sliced => [
    name,
    async () => {
      const n = counts.get(name) ?? 0;
      counts.set(name, n + 1);
      log.push(`${name}:${n}`);
      const x = (i + 1) * 100 + n * 10;
      return [x, x + 1];
    },
    (pooled) => done(name, pooled),
  ]);
}

describe("turnOrders (the latency rows' slice orders)", () => {
  for (const n of [2, 3, 4, 5]) {
    it(`puts each of ${n} systems in each place equally often and after each other equally often`, () => {
      const orders = turnOrders(n);
      expect(orders).toHaveLength(n % 2 === 0 ? n : 2 * n);
      const places = new Map<string, number>();
      const follows = new Map<string, number>();
      for (const order of orders) {
        expect([...order].sort()).toEqual([...Array(n).keys()]);
        order.forEach((k, place) => places.set(`${k}@${place}`, (places.get(`${k}@${place}`) ?? 0) + 1));
        for (let i = 1; i < n; i++) follows.set(`${order[i - 1]}>${order[i]}`, (follows.get(`${order[i - 1]}>${order[i]}`) ?? 0) + 1);
      }
      expect(places.size).toBe(n * n);
      expect(new Set(places.values())).toEqual(new Set([orders.length / n]));
      expect(follows.size).toBe(n * (n - 1)); // every ordered pair of two systems
      expect(new Set(follows.values())).toEqual(new Set([n % 2 === 0 ? 1 : 2]));
    });
  }
});

describe("Rounds.sliced (the latency rows' turns)", () => {
  it("runs the slices in the orders of turnOrders, going on across rounds", async () => {
    const log: string[] = [];
    await new Rounds(2).sliced("row", systems(["a", "b", "c", "d"], log), 4);
    const names = ["a", "b", "c", "d"];
    const expected = [...turnOrders(4), ...turnOrders(4)].flat().map((k) => names[k]);
    expect(log.map((l) => l.split(":")[0])).toEqual(expected);
  });

  it("gives each system its own samples of the round pooled, and records nothing of the one-slice warm pass", async () => {
    const rounds = new Rounds(2);
    const log: string[] = [];
    const pooled: Record<string, number[][]> = { a: [], b: [] };
    await rounds.sliced("row", systems(["a", "b"], log, (name, p) => {
      pooled[name].push(p);
      rounds.record(`m.${name}`, Math.max(...p));
    }), 3, { warm: true });
    expect(log).toHaveLength(2 * (1 + 3 + 3)); // two systems: the warm slice, then three slices a round
    expect(pooled.a).toEqual([[100, 101], [110, 111, 120, 121, 130, 131], [140, 141, 150, 151, 160, 161]]);
    expect(pooled.b).toEqual([[200, 201], [210, 211, 220, 221, 230, 231], [240, 241, 250, 251, 260, 261]]);
    expect(rounds.samples.get("m.a")).toEqual([131, 161]); // the warm pass's 101 not recorded
    expect(rounds.samples.get("m.b")).toEqual([231, 261]);
  });

  it("runs only the systems `only` names", async () => {
    const log: string[] = [];
    await new Rounds(1, "b").sliced("row", systems(["a", "b", "c"], log), 2);
    expect(log).toEqual(["b:0", "b:1"]);
  });
});
