/**
 * The Python package (clients/python): built and installed offline as its README
 * says, with Debian's python3-grpcio and python3-grpc-tools, then its own unittest
 * suite runs against real Switchyard processes (dist/main.js) and redis-server
 * processes that the suite starts on loopback.
 */
import { readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { killRunningGroups, runInGroup } from "../helpers/process-group.js";
import { buildPythonPackage, PYTHON, type PythonPackage } from "../helpers/python.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const tests = join(root, "clients/python/tests");

let pkg: PythonPackage;

beforeAll(async () => {
  pkg = await buildPythonPackage();
}, 180_000);
afterAll(() => {
  killRunningGroups();
  pkg?.cleanup();
});

/**
 * Runs the package's unittest suite; resolves to its exit code and output (unittest writes to stderr).
 * Past 240 s Python prints every thread's stack (faulthandler) and the group is killed.
 */
const runSuite = () =>
  runInGroup(PYTHON, ["-X", "faulthandler", "-c", SUITE, tests], { cwd: tmpdir(), env: { ...pkg.env, SWITCHYARD_REPO: root, SWITCHYARD_NODE: process.execPath } }, 245_000);

/** `python -m unittest discover -s DIR -v`, with every thread's stack printed if it still runs at 240 s. */
const SUITE = [
  "import faulthandler, sys, unittest",
  "faulthandler.dump_traceback_later(240, exit=True)",
  "sys.argv = ['python -m unittest', 'discover', '-s', sys.argv[1], '-v']",
  "unittest.main(module=None)",
].join("; ");

describe("clients/python", () => {
  it("generates its stubs from proto/ while it is built", () => {
    expect(pkg.files).toEqual(
      expect.arrayContaining([
        "switchyard/worker.py",
        "switchyard/v1/queue_pb2.py",
        "switchyard/v1/queue_pb2_grpc.py",
        "switchyard/v1/cron_pb2_grpc.py",
      ]),
    );
    expect(pkg.files.some((f) => f.startsWith("tests/"))).toBe(false);
  });

  it("passes its own test suite against real servers, every test run and none skipped", async () => {
    const written = readdirSync(tests)
      .filter((f) => /^test_.*\.py$/.test(f))
      .reduce((n, f) => n + (readFileSync(join(tests, f), "utf8").match(/^ {4}def test_/gm) ?? []).length, 0);
    const { code, output } = await runSuite();
    // The tail first: a failing or hung suite shows its report (or every thread's stack) there.
    expect({ code, tail: output.slice(-12000) }).toEqual({ code: 0, tail: expect.stringMatching(/\nOK\n$/) as unknown as string });
    expect(output).toMatch(new RegExp(`\\nRan ${written} tests? in `));
    expect(output).not.toMatch(/skipped/);
  }, 300_000);
});
