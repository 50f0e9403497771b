/**
 * A parsed schedule is small: croner 11 gives each pattern a 10,000-entry
 * year table (80 KB) that src/cron/schedule.ts drops, since our patterns never
 * name years. With the table, 10,000 mounted jobs held 800 MB of heap and
 * every garbage collection slowed the scheduler's ticks (bench row 9). And
 * dropping it changes no fire time.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Cron } from "croner";
import { describe, expect, it } from "vitest";
import { nextFires, parseSchedule, type Schedule } from "../../src/cron/schedule.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

function heapUsed(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe("parsed schedules", () => {
  it("take a few KB each, not croner's 80 KB year table", () => {
    const count = 2000;
    const before = heapUsed();
    const kept: Schedule[] = [];
    // Distinct expressions in several zones, as 2,000 jobs with schedules of their own would have.
    for (let i = 0; i < count; i++) {
      kept.push(parseSchedule(`${i % 60} ${Math.floor(i / 60) % 60} ${i % 24} * * *`, ["UTC", "Europe/Berlin", "America/New_York"][i % 3]));
    }
    const perSchedule = (heapUsed() - before) / count;
    expect(kept).toHaveLength(count);
    expect(perSchedule).toBeLessThan(10_000);
  });

  it("fire when croner's own patterns fire", () => {
    const cases: [string, string][] = [
      ["0 30 2 * * *", "Europe/Berlin"], // through a spring-forward gap
      ["0 30 1 * * *", "America/New_York"], // through a fall-back overlap
      ["*/5 * * * * *", "UTC"],
      ["0 0 12 29 2 *", "UTC"], // leap days only
      ["0 15 10 L * *", "Asia/Tokyo"],
      ["0 0 9 * * 1-5", "Australia/Sydney"],
    ];
    const from = Date.UTC(2026, 0, 1);
    for (const [expression, timeZone] of cases) {
      const reference = new Cron(expression, { timezone: timeZone, paused: true });
      const expected: number[] = [];
      let t = new Date(from);
      for (let i = 0; i < 400; i++) {
        const next = reference.nextRun(t);
        if (!next) break;
        expected.push(next.getTime());
        t = next;
      }
      expect(expected.length).toBeGreaterThan(5);
      expect(nextFires(parseSchedule(expression, timeZone), from, expected.length)).toEqual(expected);
    }
  });
});
