/**
 * A command run in a process group of its own (a client's test suite: python's unittest,
 * `go test`), its output gathered, the whole group killed at its limit. The servers and
 * redis-servers such a suite starts write to the same pipes: were the command killed alone,
 * they would hold the pipes open, the run would never end, and they would outlive the tests.
 */
import { spawn, type SpawnOptions } from "node:child_process";

const running = new Set<number>();

/** Kills the group led by `pid` if any of it is left. */
function killGroup(pid: number): void {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // Gone already (ESRCH).
  }
}

/** Runs `command args` in a group of its own; resolves to its exit code and output (stdout and stderr as they came). */
export function runInGroup(command: string, args: string[], options: Pick<SpawnOptions, "cwd" | "env">, limitMs: number, notFound = ""): Promise<{ code: number | null; output: string }> {
  const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let output = "";
  child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
  const pid = child.pid;
  if (pid !== undefined) running.add(pid);
  const timer = pid === undefined ? undefined : setTimeout(() => killGroup(pid), limitMs);
  return new Promise((ok, fail) => {
    child.on("error", (err) => {
      clearTimeout(timer);
      if (pid !== undefined) running.delete(pid);
      fail(new Error(`cannot run ${command}${notFound ? ` (${notFound})` : ""}: ${err.message}`));
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      if (pid !== undefined) running.delete(pid);
      ok({ code, output });
    });
  });
}

/** Kills what is left of every group still running (an afterAll's: a test that timed out leaves its group behind). */
export function killRunningGroups(): void {
  for (const pid of running) killGroup(pid);
  running.clear();
}
