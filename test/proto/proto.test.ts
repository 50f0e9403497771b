/** The API definition: lint-clean, and src/gen matches what buf generates from it. */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const buf = join(root, "node_modules", ".bin", "buf");
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
