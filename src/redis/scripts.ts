/**
 * Loads the Lua scripts in ./scripts and registers each with ioredis
 * (EVALSHA, falling back to EVAL). Each wrapper's TSDoc names its contract;
 * the .lua file's header has the details.
 */
import { readFileSync } from "node:fs";
import type { RedisClient } from "./connection.js";
import type { QueueKeys } from "./keys.js";

const scriptDir = new URL("./scripts/", import.meta.url);
const load = (name: string) => readFileSync(new URL(`${name}.lua`, scriptDir), "utf8");

const definitions = {
  syLease: { numberOfKeys: 6, lua: load("lease") },
  sySettle: { numberOfKeys: 7, lua: load("settle") },
  syRecover: { numberOfKeys: 6, lua: load("recover") },
  sySweep: { numberOfKeys: 2, lua: load("sweep") },
} as const;

type ScriptName = keyof typeof definitions;
type Invoke = (...args: (string | number | Buffer)[]) => Promise<unknown>;

/** Registers Switchyard's scripts on a connection (idempotent). */
export function defineScripts(client: RedisClient): void {
  for (const [name, def] of Object.entries(definitions)) {
    if (!(name in client)) client.defineCommand(name, def);
  }
}

function call(client: RedisClient, name: ScriptName | `${ScriptName}Buffer`, args: (string | number | Buffer)[]) {
  return (client as unknown as Record<string, Invoke>)[name](...args);
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
