/**
 * Set up before every test file (vitest's setupFiles): when the file is done,
 * a redis-server this test process started and never stopped (a test or hook
 * that failed before its clean-up, say) is killed and named, so no run leaves
 * servers behind. Registered first, this aroundAll wraps the whole file: it
 * looks once every afterAll hook, beforeAll clean-up and fixture clean-up of
 * the file has run, also when one of them threw (which skips the rest).
 * Linux only (it reads /proc); elsewhere it does nothing.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { aroundAll, expect } from "vitest";

/** The pids of this process's redis-server children still running (not yet exited). */
export function redisServerChildren(parent = process.pid): number[] {
  if (!existsSync("/proc/self/stat")) return [];
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1");
    } catch {
      continue; // gone since the listing
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")".
    const close = stat.lastIndexOf(")");
    const comm = stat.slice(stat.indexOf("(") + 1, close);
    const [state, ppid] = stat.slice(close + 2).split(" ");
    if (comm === "redis-server" && Number(ppid) === parent && state !== "Z") pids.push(Number(entry));
  }
  return pids;
}

aroundAll(async (runFile) => {
  try {
    await runFile();
  } finally {
    reap();
  }
});

function reap(): void {
  const leaked = redisServerChildren();
  for (const pid of leaked) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // exited meanwhile
    }
  }
  if (leaked.length > 0) {
    console.warn(`${expect.getState().testPath ?? "a test file"}: killed ${leaked.length} redis-server left running (pids ${leaked.join(", ")})`);
  }
}
