/**
 * The Python worker example (examples/python/worker.py) for tests: checks that
 * /usr/bin/python3 has grpc and generates the stubs into a temp folder.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

export const PYTHON = "/usr/bin/python3";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const WORKER = join(root, "examples/python/worker.py");
export const PRODUCER = join(root, "examples/python/producer.py");
const GENERATE = join(root, "examples/python/generate.sh");

/**
 * This process's environment with `extra`, and without proxy variables: tests talk to
 * loopback only, and gRPC libraries would route through a proxy they name.
 */
export function loopbackEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  for (const v of ["http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]) delete env[v];
  return env;
}

/** A prepared worker: its environment (stubs on PYTHONPATH, no proxies), and cleanup. */
export interface PythonWorker {
  env: NodeJS.ProcessEnv;
  /** Runs worker.py (or `script`) with `args`; resolves to its stdout, rejects with its stderr. */
  run(args: string[], timeoutMs?: number, script?: string): Promise<string>;
  cleanup(): void;
}

/** Prepares the worker; rejects with what to install when python3 has no grpc. */
export async function preparePython(): Promise<PythonWorker> {
  try {
    await execFileP(PYTHON, ["-c", "import grpc, grpc_tools"]);
  } catch (err) {
    throw new Error(
      `${PYTHON} cannot import grpc and grpc_tools (apt-get install python3-grpcio python3-grpc-tools):\n` +
        ((err as { stderr?: string }).stderr ?? String(err)),
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "sy-pygen-"));
  await execFileP("sh", [GENERATE, dir], { env: { ...process.env, PYTHON } });
  const env = loopbackEnv({ PYTHONPATH: dir, PYTHONDONTWRITEBYTECODE: "1" });
  return {
    env,
    async run(args, timeoutMs = 25_000, script = WORKER) {
      try {
        return (await execFileP(PYTHON, [script, ...args], { env, timeout: timeoutMs })).stdout;
      } catch (err) {
        const e = err as { code?: unknown; stderr?: string; stdout?: string };
        throw new Error(`${script} ${args.join(" ")} failed (code ${e.code}):\n${e.stderr}\n${e.stdout}`);
      }
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** The Python package (clients/python) built as a wheel and installed into a temp folder. */
export interface PythonPackage {
  /** The folder it is installed in: put it on PYTHONPATH. */
  site: string;
  /** The files of the wheel, as `pip` listed them. */
  files: string[];
  /** Environment for /usr/bin/python3 with the package importable, no proxies, no bytecode files. */
  env: NodeJS.ProcessEnv;
  cleanup(): void;
}

/**
 * Builds clients/python the way its README says (pip, offline, with Debian's
 * grpcio-tools: the stubs are generated from proto/ during the build) in a copy
 * outside the working tree, and installs the wheel into a temp folder.
 */
export async function buildPythonPackage(): Promise<PythonPackage> {
  const dir = mkdtempSync(join(tmpdir(), "sy-pypkg-"));
  const source = join(dir, "source");
  const site = join(dir, "site");
  const env = loopbackEnv({ PYTHONDONTWRITEBYTECODE: "1", PIP_NO_CACHE_DIR: "1", PIP_DISABLE_PIP_VERSION_CHECK: "1" });
  delete env.PYTHONPATH;
  try {
    cpSync(join(root, "clients/python"), source, {
      recursive: true,
      filter: (path) => !/\/(build|__pycache__|[^/]*\.egg-info)$|\/src\/switchyard\/v1$/.test(path),
    });
    const pip = (args: string[], extra: NodeJS.ProcessEnv = {}) =>
      execFileP(PYTHON, ["-m", "pip", ...args], { cwd: source, env: { ...env, ...extra }, timeout: 120_000 });
    await pip(["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", join(dir, "wheel"), "."], { SWITCHYARD_PROTO_DIR: join(root, "proto") });
    const [wheel] = readdirSync(join(dir, "wheel"));
    await pip(["install", "--no-deps", "--no-index", "--target", site, join(dir, "wheel", wheel)]);
    const listed = await execFileP(PYTHON, ["-c", "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))", join(dir, "wheel", wheel)]);
    return { site, files: listed.stdout.trim().split("\n"), env: { ...env, PYTHONPATH: site }, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    const e = err as { stderr?: string; stdout?: string };
    throw new Error(`building clients/python failed (python3-pip, python3-grpc-tools installed?):\n${e.stderr ?? ""}\n${e.stdout ?? String(err)}`);
  }
}
