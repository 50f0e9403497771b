/**
 * Loads the Lua scripts in ./scripts and registers each with ioredis
 * (EVALSHA, falling back to EVAL). Each wrapper's TSDoc names its contract;
 * the .lua file's header has the details.
 */
import { readFileSync } from "node:fs";
import type { RedisClient } from "./connection.js";
import type { QueueKeys, SystemKeys } from "./keys.js";
import { SwitchyardError } from "../errors.js";
import { Command } from "ioredis";
import { FramedCommand, type BulkStrings } from "./bulk-strings.js";

const scriptDir = new URL("./scripts/", import.meta.url);
const load = (name: string) => readFileSync(new URL(`${name}.lua`, scriptDir), "utf8");

/** Sent as EVAL by pushItems rather than registered (see there). */
const pushLua = load("push");

const definitions = {
  syLease: { numberOfKeys: 6, lua: load("lease") },
  sySettle: { numberOfKeys: 7, lua: load("settle") },
  syRecover: { numberOfKeys: 6, lua: load("recover") },
  sySweep: { numberOfKeys: 2, lua: load("sweep") },
  // Called with the number of keys first: two, plus a lock key and a fence counter per job.
  syClaimTicks: { lua: load("claim-ticks") },
  syClaimInterval: { numberOfKeys: 2, lua: load("claim-interval") },
  syJobLock: { numberOfKeys: 2, lua: load("job-lock") },
  syJobPut: { numberOfKeys: 1, lua: load("job-put") },
  syDeadLetters: { numberOfKeys: 3, lua: load("dead-letters") },
} as const;

type ScriptName = keyof typeof definitions;
type Invoke = (...args: (string | number | Buffer)[]) => Promise<unknown>;

/** Registers Switchyard's scripts on a connection (idempotent); connectRedis does it for the command connection. */
export function defineScripts(client: RedisClient): void {
  for (const [name, def] of Object.entries(definitions)) {
    if (!(name in client)) client.defineCommand(name, def);
  }
}

function call(client: RedisClient, name: ScriptName | `${ScriptName}Buffer`, args: (string | number | Buffer)[]) {
  return (client as unknown as Record<string, Invoke>)[name](...args);
}

/**
 * Pushes `values` (oldest first) onto `key`: a plain LPUSH, or with `ttlMs` >
 * 0 push.lua, which also resets the key's expiry. Either refuses a key that
 * is not a list and changes nothing: FAILED_PRECONDITION. With `wait`, WAIT
 * follows on the same connection (pipelined, so on a cluster it reaches the
 * queue's master) and it resolves to how many replicas acknowledged; both
 * commands fail ("Command timed out") unless answered within the WAIT's
 * timeout and `wait.replyMs` (the connection's own command timeout would cut
 * a WAIT short, so the waiter connection has none).
 *
 * The values go out framed as they are (FramedCommand); push.lua goes as EVAL
 * with its text, which Redis hashes to find it compiled, because an EVALSHA
 * refused with NOSCRIPT could not be sent again with the pipeline's WAIT.
 */
export async function pushItems(
  client: RedisClient, key: string, ttlMs: number, values: readonly BulkStrings[], wait?: { replicas: number; timeoutMs: number; replyMs: number },
): Promise<number> {
  const push = ttlMs > 0 ? new FramedCommand("eval", [pushLua, 1, key, ttlMs], values) : new FramedCommand("lpush", [key], values);
  try {
    if (!wait) {
      client.sendCommand(push);
      return (await push.promise) as number;
    }
    const pipeline = client.pipeline() as unknown as { sendCommand(c: Command): unknown; exec(): Promise<[Error | null, unknown][]> };
    const waitFor = new Command("wait", [String(wait.replicas), String(wait.timeoutMs)]);
    // A command's first timeout is the one it keeps (ioredis Command.setTimeout).
    push.setTimeout(wait.timeoutMs + wait.replyMs);
    waitFor.setTimeout(wait.timeoutMs + wait.replyMs);
    pipeline.sendCommand(push);
    pipeline.sendCommand(waitFor);
    const [[pushError], [waitError, acked]] = await pipeline.exec();
    if (pushError) throw pushError;
    if (waitError) throw waitError;
    return acked as number;
  } catch (err) {
    throw await notAList(client, key, err);
  }
}

/** FAILED_PRECONDITION for a push refused because `key` is not a list; `err` itself otherwise. */
async function notAList(client: RedisClient, key: string, err: unknown): Promise<unknown> {
  const message = err instanceof Error ? err.message : "";
  // push.lua names the type; a plain LPUSH only says WRONGTYPE, so ask.
  const type = /SYWRONGTYPE (\w+)/.exec(message)?.[1] ?? (message.startsWith("WRONGTYPE") ? await client.type(key).catch(() => "value of another type") : undefined);
  if (!type) return err;
  return new SwitchyardError(
    "failed_precondition",
    `key "${key}" holds a ${type}, not a list; delete or rename it before using it as a queue`,
  );
}

/** dead-letters.lua: what happens to the chosen dead letters. */
export type DeadLetterAction = "requeue" | "delete";

/**
 * dead-letters.lua: requeues or deletes dead letters, either `values` (one
 * list entry each) or, with `all`, up to `all` of them oldest first; resolves
 * to how many moved or went.
 */
export async function settleDeadLetters(
  client: RedisClient, keys: QueueKeys, action: DeadLetterAction, which: { all: number } | { values: Buffer[] },
): Promise<number> {
  const args = "all" in which ? ["all", which.all] : ["values", ...which.values];
  return (await call(client, "syDeadLetters", [keys.deadLetter, keys.queue, keys.deliveries, action, ...args])) as number;
}

/** A delivery recorded by the lease script. */
export interface LeasedItem {
  value: Buffer;
  sha: string;
  fence: number;
  deliveries: number;
}

/** lease.lua: moves up to `max` items into processing and records each delivery. */
export async function leaseItems(
  client: RedisClient,
  keys: QueueKeys,
  now: number,
  max: number,
  recoveryTtlMs: number,
): Promise<LeasedItem[]> {
  const flat = (await call(client, "syLeaseBuffer", [
    keys.queue, keys.processing, keys.leases, keys.deliveries, keys.fence, keys.recovery || keys.processing,
    now, max, keys.recovery ? "1" : "0", recoveryTtlMs,
  ])) as (Buffer | number)[];
  const items: LeasedItem[] = [];
  for (let i = 0; i < flat.length; i += 4) {
    items.push({
      value: flat[i] as Buffer,
      sha: (flat[i + 1] as Buffer).toString("latin1"),
      fence: Number(flat[i + 2]),
      deliveries: Number(flat[i + 3]),
    });
  }
  return items;
}

/** A settle action of settle.lua. */
export type SettleAction = "a" | "d" | "r" | "b" | "u" | "x" | "c";

/** One settle for {@link settleItems}. */
export interface SettleOp {
  action: SettleAction;
  sha: string;
  fence: number;
}

/** settle.lua: applies settles that still hold their item; returns one code per settle. */
export async function settleItems(
  client: RedisClient,
  keys: QueueKeys,
  now: number,
  maxDeliveries: number,
  ops: readonly SettleOp[],
): Promise<number[]> {
  const args: (string | number)[] = [
    keys.queue, keys.processing, keys.leases, keys.deliveries, keys.fence, keys.recovery || keys.processing,
    keys.deadLetter, now, maxDeliveries, keys.recovery ? "1" : "0",
  ];
  for (const op of ops) args.push(op.action, op.sha, op.fence);
  return (await call(client, "sySettle", args)) as number[];
}

/** recover.lua: returns claims idle longer than `minIdleMs`; at most `limit` per call. */
export async function recoverStale(
  client: RedisClient,
  keys: QueueKeys,
  now: number,
  minIdleMs: number,
  limit: number,
  maxDeliveries: number,
): Promise<{ recovered: number; deadLettered: number; seen: number }> {
  const [recovered, deadLettered, seen] = (await call(client, "syRecover", [
    keys.queue, keys.processing, keys.leases, keys.deliveries, keys.recovery, keys.deadLetter,
    now, minIdleMs, limit, maxDeliveries,
  ])) as number[];
  return { recovered, deadLettered, seen };
}

/** sweep.lua: records a claim for processing items [first, last] that have none. */
export async function sweepUnclaimed(
  client: RedisClient,
  keys: QueueKeys,
  now: number,
  first: number,
  last: number,
): Promise<{ added: number; length: number }> {
  const [added, length] = (await call(client, "sySweep", [keys.processing, keys.recovery, now, first, last])) as number[];
  return { added, length };
}

/** The outcome of a tick or interval claim; `job` is the job's JSON when it was read. */
export interface Claim {
  result: "gone" | "taken" | "wait" | "inactive" | "run";
  job?: string;
  /** Interval claims: the last run time (wait) or the claimed run time (run, inactive). */
  atMs?: number;
}

/** The execution lock as an acquisition found it: taken with a new fence, or held by the run with `fence`. */
export interface LockAttempt {
  acquired: boolean;
  fence: number;
}

/** One job's claim of a tick; `lock` is set when the claim also tried the job's execution lock. */
export interface TickClaim extends Claim {
  lock?: LockAttempt;
}

/**
 * claim-ticks.lua: claims the tick at `tickMs` of each job in `ids` once across
 * instances, and with `lock` also takes the execution lock of each claimed job
 * whose policy needs it. One claim per id, in order.
 */
export async function claimTicks(
  client: RedisClient, keys: SystemKeys, tickMs: number, ids: readonly string[], lock?: { owner: string; now: number; ttlMs: number },
): Promise<TickClaim[]> {
  const args: (string | number)[] = [2 + 2 * ids.length, keys.jobs, keys.ticks];
  for (const id of ids) args.push(keys.jobLock(id), keys.jobFence(id));
  args.push(tickMs, lock?.owner ?? "", lock?.now ?? 0, lock?.ttlMs ?? 0, ...ids);
  const flat = (await call(client, "syClaimTicks", args)) as (string | number)[];
  const claims: TickClaim[] = [];
  for (let i = 0; i < flat.length; i += 4) {
    const [result, job, lockState, fence] = [flat[i] as Claim["result"], flat[i + 1] as string, flat[i + 2] as number, flat[i + 3] as number];
    claims.push({
      result,
      job: job === "" ? undefined : job,
      lock: lockState === 0 ? undefined : { acquired: lockState === 1, fence },
    });
  }
  return claims;
}

/** claim-interval.lua: claims the next run of interval job `id` if its interval has passed. */
export async function claimInterval(
  client: RedisClient, jobs: string, ticks: string, id: string, now: number, intervalMs: number,
): Promise<Claim> {
  const [result, at, job] = (await call(client, "syClaimInterval", [jobs, ticks, id, now, intervalMs])) as [Claim["result"], string?, string?];
  return { result, atMs: at === undefined ? undefined : Number(at), job };
}

/** job-lock.lua acquire: the new fence, or the live holder's fence when another run holds the lock. */
export async function acquireJobLock(
  client: RedisClient, lock: string, fenceKey: string, owner: string, now: number, ttlMs: number,
): Promise<LockAttempt> {
  const [ok, fence] = (await call(client, "syJobLock", [lock, fenceKey, "acquire", owner, 0, now, ttlMs])) as number[];
  return { acquired: ok === 1, fence };
}

/** job-lock.lua renew / release: true when the caller still held the lock. */
export async function touchJobLock(
  client: RedisClient, op: "renew" | "release", lock: string, fenceKey: string, owner: string, fence: number, now: number, ttlMs: number,
): Promise<boolean> {
  return (await call(client, "syJobLock", [lock, fenceKey, op, owner, fence, now, ttlMs])) === 1;
}

/** job-put.lua: stores `next` for job `id` if its record is still `read`; announces it on `channel`. */
export async function replaceJob(client: RedisClient, jobs: string, channel: string, id: string, read: string, next: string): Promise<boolean> {
  return (await call(client, "syJobPut", [jobs, id, read, next, channel])) === 1;
}
