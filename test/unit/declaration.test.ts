/** Queue declaration rules that need no Redis: defaults and the hash-slot check. */
import { describe, expect, it } from "vitest";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { parseToken, formatToken } from "../../src/queue/token.js";
import { slotOf } from "../../src/redis/keys.js";

describe("validateQueueSpec", () => {
  it("fills the seed's defaults for a reliable queue", () => {
    const c = validateQueueSpec({ name: "{thumbnails}", mode: "reliable", recoverySet: "{thumbnails}.claims", minIdleMs: 60_000 }, 5);
    expect(c).toMatchObject({
      processingList: "{thumbnails}.processing",
      deadLetterList: "{thumbnails}.dead",
      maxDeliveries: 25,
      createTimeMs: 5,
    });
  });

  it("names the hash tag to use when keys fall in different slots", () => {
    expect(slotOf("jobs")).not.toBe(slotOf("jobs.processing"));
    expect(() => validateQueueSpec({ name: "jobs", mode: "reliable" }, 0)).toThrow(/use \{jobs\} and \{jobs\}\.processing/);
    expect(() => validateQueueSpec({ name: "{a}", mode: "reliable", processingList: "{b}.processing" }, 0)).toThrow(
      /use \{a\} and \{a\}\.processing/,
    );
  });

  it("names the corrected recovery-set key when the recovery set is the stray one", () => {
    const spec = { name: "{a}", mode: "reliable" as const, recoverySet: "{b}.claims", minIdleMs: 60_000 };
    expect(slotOf("{a}")).not.toBe(slotOf("{b}.claims"));
    expect(() => validateQueueSpec(spec, 0)).toThrow(/"\{b\}\.claims" in \d+\).*use \{a\}, \{a\}\.processing and \{a\}\.claims/);
  });

  it("accepts a simple queue without a hash tag", () => {
    expect(validateQueueSpec({ name: "cache.warmups", mode: "simple" }, 0).mode).toBe("simple");
  });
});

describe("lease tokens", () => {
  it("round-trip queue, fence and owner, including names with dots and braces", () => {
    const ref = { queue: "{thumb.nails}:x", fence: 42, owner: "k2x9q0ab00" };
    expect(parseToken(formatToken(ref))).toEqual(ref);
    expect(parseToken(formatToken({ queue: "cache.warmups", fence: 7, owner: "" }))).toEqual({ queue: "cache.warmups", fence: 7, owner: "" });
  });

  it("refuses anything Switchyard did not issue", () => {
    expect(() => parseToken("r.1.zz.cQ")).toThrow(/malformed/);
    expect(() => parseToken("")).toThrow(/required/);
  });
});
