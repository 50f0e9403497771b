/**
 * Returns (queue/returns.ts) keeps trying to give items back while the instance
 * lives, and stops when the instance stops: an attempt still in flight at stop()
 * that then fails is not tried again. Before, it armed a new retry, and a
 * stopped instance went on trying (and warning) every 2 s for as long as its
 * process lived. The settler here is a stand-in whose answers the test decides,
 * and the retry timers are vitest's fake timers: no wall time passes.
 */
import { afterEach, beforeEach, expect, it, vi } from "vitest";
import { normalizeConfig } from "../../src/queue/declaration.js";
import { Returns } from "../../src/queue/returns.js";
import type { Settler } from "../../src/queue/settler.js";
import { createLogger } from "../../src/log.js";

const config = normalizeConfig({ name: "{prints}", mode: "reliable" });

/** A Returns whose settler answers each attempt when the test calls `fail` or `succeed`. */
function returnsWithAnswers() {
  const attempts: { fail(err: Error): void; succeed(): void }[] = [];
  const settler = {
    settleMany: (_: unknown, ops: readonly unknown[]) =>
      new Promise((resolve, reject) => attempts.push({ fail: reject, succeed: () => resolve(ops.map(() => ({ code: 1, dueMs: 0 }))) })),
  } as unknown as Settler;
  const lines: string[] = [];
  const returns = new Returns(settler, () => config, createLogger("warn", (line) => void lines.push(line)));
  return { returns, attempts, lines };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

it("tries a failed return again after 100 ms, and again until it takes", async () => {
  const { returns, attempts } = returnsWithAnswers();
  void returns.give(config, ["7@a", "8@a"], "return");
  expect(attempts).toHaveLength(1);
  attempts[0].fail(new Error("Connection is closed."));
  await vi.advanceTimersByTimeAsync(99);
  expect(attempts).toHaveLength(1);
  await vi.advanceTimersByTimeAsync(1);
  expect(attempts).toHaveLength(2);
  attempts[1].succeed();
  await vi.advanceTimersByTimeAsync(0);
  expect(returns.size).toBe(0);
  await vi.advanceTimersByTimeAsync(60_000);
  expect(attempts).toHaveLength(2);
});

it("does not try again after stop(), when the attempt in flight at stop() fails", async () => {
  const { returns, attempts, lines } = returnsWithAnswers();
  void returns.give(config, ["7@a"], "return");
  attempts[0].fail(new Error("Command timed out"));
  await vi.advanceTimersByTimeAsync(100);
  expect(attempts).toHaveLength(2); // the retry is in flight
  returns.stop();
  attempts[1].fail(new Error("Command timed out"));
  await vi.advanceTimersByTimeAsync(60_000);
  expect(attempts).toHaveLength(2);
  expect(returns.size).toBe(1); // left for another instance to return
  expect(lines.at(-1)).toContain("this instance stopped, another will return them");
});

it("once stopped with nothing in flight, says at once that what waits will not go back", async () => {
  const { returns, attempts } = returnsWithAnswers();
  void returns.give(config, ["7@a"], "return");
  attempts[0].fail(new Error("Command timed out"));
  await vi.advanceTimersByTimeAsync(0);
  let idle: boolean | undefined;
  void returns.idle(60_000).then((back) => (idle = back));
  returns.stop();
  await vi.advanceTimersByTimeAsync(0);
  expect(idle).toBe(false);
  // A second stop of the instance asks again: answered at once too, not after its time.
  let again: boolean | undefined;
  void returns.idle(60_000).then((back) => (again = back));
  await vi.advanceTimersByTimeAsync(0);
  expect(again).toBe(false);
});

it("once stopped, waits for the attempt in flight: true if it takes, false at once if it fails", async () => {
  for (const takes of [true, false]) {
    const { returns, attempts } = returnsWithAnswers();
    void returns.give(config, ["7@a"], "return");
    returns.stop();
    let idle: boolean | undefined;
    void returns.idle(60_000).then((back) => (idle = back));
    await vi.advanceTimersByTimeAsync(0);
    expect(idle).toBeUndefined();
    if (takes) attempts[0].succeed();
    else attempts[0].fail(new Error("Connection is closed."));
    await vi.advanceTimersByTimeAsync(0);
    expect(idle).toBe(takes);
  }
});
