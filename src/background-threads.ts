/**
 * The server process's background threads (V8's compiler and garbage-collector
 * helpers, libuv's pool) at a lower CPU priority than its main thread, which
 * serves every call.
 *
 * On a host with few cores a helper that compiles for a millisecond or more
 * can hold the core the main thread was woken on, and the main thread waits
 * behind it, often with the other core idle (bench/README.md, "A V8 helper
 * held the core the server's main thread was woken on"). A helper with a
 * higher nice value gives way to the main thread. The main thread waits on no
 * compile; a collection's main thread does the work its helpers have not begun,
 * but waits for a piece a helper has, and a call that uses libuv's pool (zlib,
 * DNS) waits for it: on cores kept busy those take longer at a high nice value.
 *
 * Linux only: there setpriority(PRIO_PROCESS, tid) sets one thread's nice
 * value, and raising it needs no privilege. Threads started later keep the main
 * thread's (libuv's pool has started by the time the server has: Node's module
 * loading uses it).
 */
import { readdirSync } from "node:fs";
import { getPriority, setPriority } from "node:os";

/** What `lowerBackgroundThreads` did: the threads lowered, and why any were not. */
export interface Lowered {
  lowered: number;
  failed?: string;
}

/**
 * Sets the nice value of every thread of this process but the main one to `nice` (0 to 19),
 * leaving a thread that is at it or above it already (a server started under `nice`).
 */
export function lowerBackgroundThreads(nice: number): Lowered {
  if (process.platform !== "linux") return { lowered: 0 };
  let tids: number[];
  try {
    tids = readdirSync("/proc/self/task").map(Number);
  } catch (err) {
    return { lowered: 0, failed: `cannot list this process's threads (${(err as Error).message})` };
  }
  let lowered = 0;
  let failed: string | undefined;
  for (const tid of tids) {
    if (tid === process.pid || !Number.isInteger(tid)) continue;
    try {
      if (getPriority(tid) >= nice) continue;
      setPriority(tid, nice);
      lowered++;
    } catch (err) {
      // A thread that ended since the listing: ESRCH. Anything else is reported once.
      if ((err as { info?: { code?: string } }).info?.code !== "ESRCH") failed ??= (err as Error).message;
    }
  }
  return failed ? { lowered, failed } : { lowered };
}
