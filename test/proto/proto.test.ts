/**
 * The API definition: lint-clean, wire-compatible with the committed baseline
 * (buf breaking, offline with the buf of node_modules), and src/gen matches
 * what buf generates from it.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const buf = join(root, "node_modules", ".bin", "buf");
/** The API as last accepted (npm run baseline:proto rebuilds it; see README, API discipline). */
const BASELINE = "test/proto/baseline.binpb";
const work = mkdtempSync(join(tmpdir(), "sy-proto-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

describe("proto", () => {
  it("is clean under buf lint (STANDARD)", async () => {
    const { stdout } = await run(buf, ["lint"], { cwd: root });
    expect(stdout).toBe("");
  });

  it("breaks nothing against the committed baseline (buf breaking, FILE rules)", async () => {
    const { stdout } = await run(buf, ["breaking", "proto", "--against", BASELINE], { cwd: root });
    expect(stdout).toBe("");
  });

  it("the breaking check refuses a renumbered field, naming it", async () => {
    const changed = mkdtempSync(join(tmpdir(), "sy-breaking-"));
    try {
      for (const entry of ["proto", "third_party", "buf.yaml"]) cpSync(join(root, entry), join(changed, entry), { recursive: true });
      const queueProto = join(changed, "proto", "switchyard", "v1", "queue.proto");
      const text = readFileSync(queueProto, "utf8");
      expect(text).toContain("  string last_error = 9;\n}");
      writeFileSync(queueProto, text.replace("  string last_error = 9;\n}", "  string last_error = 19;\n}"));
      const err = await run(buf, ["breaking", "proto", "--against", join(root, BASELINE)], { cwd: changed }).then(
        () => undefined,
        (e: { code: number; stdout: string }) => e,
      );
      expect(err?.code).toBe(100);
      expect(err?.stdout).toContain('Previously present field "9" with name "last_error" on message "Delivery" was deleted.');
    } finally {
      rmSync(changed, { recursive: true, force: true });
    }
  });

  it("matches the committed generated code in src/gen", async () => {
    for (const entry of ["proto", "third_party", "buf.yaml", "buf.gen.yaml"]) cpSync(join(root, entry), join(work, entry), { recursive: true });
    await run(buf, ["generate"], { cwd: work, env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}` } });
    const fresh = join(work, "src", "gen");
    const committed = join(root, "src", "gen");
    const names = (dir: string) => files(dir).map((f) => relative(dir, f)).sort();
    expect(names(committed)).toEqual(names(fresh));
    for (const name of names(fresh)) {
      expect(readFileSync(join(committed, name), "utf8"), `src/gen/${name} is stale: run npm run generate`).toBe(
        readFileSync(join(fresh, name), "utf8"),
      );
    }
  });
});
