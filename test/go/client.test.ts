/**
 * The Go client (clients/go), built the Debian way: Go 1.19 in GOPATH mode with
 * Debian's grpc-go and protobuf packages (GOPATH/src/switchyard is this checkout).
 * Its stubs must be what clients/go/buf.gen.yaml makes of proto/ today, and its own
 * tests (go test, against real Switchyard and redis-server processes on loopback)
 * must pass: one ack message per item at speed, and nothing lost to a SIGKILL.
 */
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { killRunningGroups, runInGroup } from "../helpers/process-group.js";
import { loopbackEnv } from "../helpers/python.js";

const execFileP = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const pkg = "switchyard/clients/go/worker";

let gopath: string;
let env: NodeJS.ProcessEnv;

beforeAll(() => {
  gopath = mkdtempSync(join(tmpdir(), "sy-gopath-"));
  mkdirSync(join(gopath, "src"));
  symlinkSync(root, join(gopath, "src", "switchyard"));
  env = loopbackEnv({
    GO111MODULE: "off",
    GOPATH: `${gopath}:/usr/share/gocode`,
    // Kept between runs: compiling Debian's grpc-go takes a while the first time.
    GOCACHE: join(tmpdir(), "switchyard-go-build-cache"),
    GOFLAGS: "",
    CGO_ENABLED: "0",
    SWITCHYARD_REPO: root,
    SWITCHYARD_NODE: process.execPath,
  });
});
afterAll(() => {
  killRunningGroups();
  rmSync(gopath, { recursive: true, force: true });
});

/** Runs `go args` in the package's folder, killed with all it started at `timeoutMs`. */
const go = (args: string[], timeoutMs: number) => runInGroup("go", args, { cwd: join(gopath, "src", pkg), env }, timeoutMs, "apt-get install golang-go");

describe("clients/go", () => {
  it("holds the stubs clients/go/buf.gen.yaml generates from proto/", async () => {
    const out = mkdtempSync(join(tmpdir(), "sy-gogen-"));
    try {
      await execFileP(join(root, "node_modules/.bin/buf"), ["generate", "--template", "clients/go/buf.gen.yaml", "-o", out], { cwd: root }).catch((err: { stderr?: string }) => {
        throw new Error(`clients/go/buf.gen.yaml failed (a new proto file needs an M option there):\n${err.stderr ?? String(err)}`);
      });
      const committed = join(root, "clients/go/switchyardpb");
      const generated = join(out, "clients/go/switchyardpb");
      const stale = "the Go stubs are not current: run npx buf generate --template clients/go/buf.gen.yaml (and commit clients/go/switchyardpb)";
      expect(readdirSync(generated).sort(), stale).toEqual(readdirSync(committed).sort());
      for (const file of readdirSync(committed)) {
        expect(readFileSync(join(generated, file), "utf8"), `${file} is stale: run npx buf generate --template clients/go/buf.gen.yaml`).toBe(
          readFileSync(join(committed, file), "utf8"),
        );
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 60_000);

  it("vets clean and passes its own tests against a real server", async () => {
    const vet = await go(["vet", "switchyard/clients/go/switchyardpb", pkg], 300_000);
    expect(vet, vet.output).toMatchObject({ code: 0 });
    const { code, output } = await go(["test", "-count=1", "-timeout=330s", "-v", pkg], 420_000); // past 330 s go prints every goroutine's stack
    const tests = readdirSync(join(root, "clients/go/worker")).filter((f) => f.endsWith("_test.go"));
    const written = tests.flatMap((f) => [...readFileSync(join(root, "clients/go/worker", f), "utf8").matchAll(/^func (Test\w+)\(t \*testing\.T\)/gm)].map((m) => m[1]));
    expect(written.length).toBeGreaterThanOrEqual(6);
    for (const name of written) expect(output, output).toContain(`--- PASS: ${name} `);
    expect(output).not.toContain("--- SKIP");
    expect(code, output).toBe(0);
    const rate = /GO WORKER RATE (\d+) items\/s/.exec(output);
    const kill = /GO WORKER SIGKILL .* 0 lost/.exec(output);
    expect(rate, output).not.toBeNull();
    expect(kill, output).not.toBeNull();
    console.log(`${rate![0]}\n${kill![0]}`);
  }, 600_000);
});
