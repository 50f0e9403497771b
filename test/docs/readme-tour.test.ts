/**
 * The README's tour shows what its commands print: scripts/readme-tour.mjs
 * runs them against a real server (`node dist/main.js`, built by `npm test`,
 * with its embedded Redis) through buf curl and redis-cli, and every block of
 * the tour must equal the run's, item ids, lease tokens' owner part, times and
 * claim ages aside. `npm run readme:tour` rewrites the blocks from a run.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain ES module script, without types
import { normalize, readmeBlocks, runTour } from "../../scripts/readme-tour.mjs";

const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");

describe("README tour", () => {
  it("shows what its commands print when run against a real server", async () => {
    const shown = (readmeBlocks(readme) as { text: string }[]).map((b) => normalize(b.text) as string);
    const ran = ((await runTour()) as string[]).map((b) => normalize(b) as string);
    expect(shown.length, "the tour's output blocks: npm run readme:tour rewrites them").toBe(ran.length);
    for (let i = 0; i < ran.length; i++) expect(shown[i], `tour block ${i + 1}: npm run readme:tour rewrites it`).toBe(ran[i]);
  }, 60_000);

  it("normalizes only what differs between runs", () => {
    const a = '{\n  "ids": [\n    "WkaVBh4N1"\n  ]\n}\n"leaseToken": "r.3.00gl9onot9.e3RodW1ibmFpbHN9" "createTime": "2026-12-01T16:28:33.384Z" "oldestClaimAge": "0.276s"';
    const b = '{\n  "ids": [\n    "a3lIZc6B7"\n  ]\n}\n"leaseToken": "r.3.1x2y3z.e3RodW1ibmFpbHN9" "createTime": "2026-11-30T02:51:27.005Z" "oldestClaimAge": "1.751s"';
    expect(normalize(a)).toBe(normalize(b));
    // A fence, a count or a message is compared as it is.
    expect(normalize(a.replace('"r.3.', '"r.4.'))).not.toBe(normalize(b));
    expect(normalize('"ready": "1"')).not.toBe(normalize('"ready": "2"'));
  });
});
