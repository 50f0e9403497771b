/**
 * The Python worker example (examples/python/worker.py) for tests: checks that
 * /usr/bin/python3 has grpc and generates the stubs into a temp folder.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
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
  const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: dir, PYTHONDONTWRITEBYTECODE: "1" };
  for (const v of ["http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]) delete env[v];
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
