/**
 * Loads the Lua scripts in ./scripts and registers each with ioredis
 * (EVALSHA, falling back to EVAL). Each wrapper's TSDoc names its contract;
 * the .lua file's header has the details.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { RedisClient } from "./connection.js";
import type { QueueKeys, SystemKeys } from "./keys.js";
import { SwitchyardError } from "../errors.js";
import { Command } from "ioredis";
import { FramedArgs, FramedCommand, type BulkStrings } from "./bulk-strings.js";
import { libFor } from "./lua-lib.js";

const scriptDir = new URL("./scripts/", import.meta.url);
const load = (name: string) => readFileSync(new URL(`${name}.lua`, scriptDir), "utf8");
/**
 * A script after the shared functions of `parts` (lib.lua's by default), behind its shebang line, which must
 * stay first. Of lib.lua, only what the script and its other parts use (see lua-lib.ts): Redis runs the whole
 * text on every call.
 */
function withLib(name: string, parts = ["lib"]): string {
  const text = load(name);
  const shebang = text.startsWith("#!") ? text.slice(0, text.indexOf("\n") + 1) : "";
  const others = parts.filter((part) => part !== "lib").map((part) => `${load(part)}\n`).join("");
  const lib = parts.includes("lib") ? `${libFor(load("lib"), others + text)}\n` : "";
  return `${shebang}${lib}${others}${text.slice(shebang.length)}`;
}

/**
 * Sent as EVAL by pushItems rather than registered (see there), so its text goes with every push that has
 * a ttl: push-values.lua alone, not all of lib.lua, and without the files' header comments (`--[[ … ]]`).
 */
const pushLua = withLib("push", ["push-values"]).replace(/--\[\[[\s\S]*?\]\]\n/g, "");
/** Sent by pushAndLease as a FramedCommand, not registered (see there). */
const pushLeaseLua = withLib("push-lease", ["lib", "push-values"]);
const pushLeaseSha = createHash("sha1").update(pushLeaseLua).digest("hex");

const definitions = {
  syLease: { numberOfKeys: 5, lua: withLib("lease") },
  sySettle: { numberOfKeys: 8, lua: withLib("settle") },
  sySettleLease: { numberOfKeys: 8, lua: withLib("settle-lease") },
  syRecover: { numberOfKeys: 7, lua: withLib("recover") },
  syAdopt: { numberOfKeys: 4, lua: withLib("adopt") },
  syPop: { numberOfKeys: 2, lua: load("pop") },
  syPromote: { numberOfKeys: 2, lua: load("promote") },
  syEnqueue: { numberOfKeys: 4, lua: load("enqueue") },
  // Called with the number of keys first: two, plus a lock key and a fence counter per job.
  syClaimTicks: { lua: load("claim-ticks") },
  syClaimInterval: { numberOfKeys: 2, lua: load("claim-interval") },
  syJobLock: { numberOfKeys: 2, lua: load("job-lock") },
  syJobPut: { numberOfKeys: 1, lua: load("job-put") },
  syDeadLetters: { numberOfKeys: 2, lua: withLib("dead-letters") },
  syStreamLease: { numberOfKeys: 4, lua: withLib("stream-lease") },
  syStreamRebase: { numberOfKeys: 2, lua: load("stream-rebase") },
  syStreamSettle: { numberOfKeys: 3, lua: withLib("stream-settle") },
  syStreamSettleLease: { numberOfKeys: 4, lua: withLib("stream-settle-lease") },
  syStreamRetire: { numberOfKeys: 1, lua: load("stream-retire") },
  syStreamRestore: { numberOfKeys: 1, lua: load("stream-restore") },
  syStreamGroupDelete: { numberOfKeys: 2, lua: withLib("stream-group-delete") },
  syDeclare: { numberOfKeys: 3, lua: load("declare") },
  syUndeclare: { numberOfKeys: 3, lua: load("undeclare") },
  syReadDeclaration: { numberOfKeys: 2, lua: load("read-declaration") },
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
  const push = FramedCommand.of(ttlMs > 0 ? "eval" : "lpush", ttlMs > 0 ? [pushLua, 1, key, ttlMs] : [key], values);
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

/**
 * FAILED_PRECONDITION for a write refused because `key` is not a list (or, when
 * the script names another key and type, "SYWRONGTYPE <type> <wanted> <key>" of
 * lib.lua's wrong_type, because that key is not of that type); `err` itself otherwise.
 */
async function notAList(client: RedisClient, key: string, err: unknown): Promise<unknown> {
  const message = err instanceof Error ? err.message : "";
  // The scripts name the type; a plain LPUSH only says WRONGTYPE, so ask.
  const named = /SYWRONGTYPE (\w+)(?: (\w+) (.*))?$/s.exec(message);
  const type = named?.[1] ?? (message.startsWith("WRONGTYPE") ? await client.type(key).catch(() => "value of another type") : undefined);
  if (!type) return err;
  const wanted = named?.[2] === "zset" ? "sorted set" : named?.[2] ?? "list";
  const at = named?.[3] ?? key;
  return new SwitchyardError(
    "failed_precondition",
    `key "${at}" holds a ${type}, not ${/^[aeiou]/.test(wanted) ? "an" : "a"} ${wanted}; delete or rename it: the queue "${key}" needs it (nothing was written)`,
    { reason: "WRONG_KEY_TYPE", metadata: { key: at } },
  );
}

/** A script call's rejection: notAList's error when the script refused a key of another type (lib.lua wrong_type), else `err`. */
function refusedType(client: RedisClient, queue: string) {
  return async (err: unknown): Promise<never> => {
    throw await typedError(client, queue, err);
  };
}

/** notAList's error for `err` when it is a script's refusal of a key of another type (lib.lua wrong_type), else `err`. */
async function typedError<E>(client: RedisClient, queue: string, err: E): Promise<E> {
  return err instanceof Error && err.message.startsWith("SYWRONGTYPE") ? ((await notAList(client, queue, err)) as E) : err;
}

/** One item for {@link enqueueScheduled}. */
export interface ScheduledItem {
  id: string;
  value: Buffer;
  /** When it becomes ready (ms; 0: now). */
  dueMs: number;
  /** "" : none. */
  idempotencyKey: string;
}

/**
 * enqueue.lua: enqueues items that wait for a time or carry an idempotency
 * key; resolves to one answer per item: "" when added, else the id of the
 * item first enqueued with its key. FAILED_PRECONDITION when the queue key is not a list.
 */
export async function enqueueScheduled(
  client: RedisClient, keys: QueueKeys, now: number, windowMs: number, ttlMs: number, items: readonly ScheduledItem[],
): Promise<string[]> {
  const args: (string | number | Buffer)[] = [keys.queue, keys.delayed, keys.idempotency, keys.idempotencyTime, now, windowMs, ttlMs];
  for (const it of items) args.push(it.id, it.value, it.dueMs, it.idempotencyKey);
  try {
    return (await call(client, "syEnqueue", args)) as string[];
  } catch (err) {
    throw await notAList(client, keys.queue, err);
  }
}

/** dead-letters.lua: what happens to the chosen dead letters. */
export type DeadLetterAction = "requeue" | "delete";

/**
 * dead-letters.lua: requeues (without their history) or deletes dead letters,
 * either `values` (one list entry each) or, with `all`, up to `all` of them
 * oldest first; resolves to how many moved or went.
 */
export async function settleDeadLetters(
  client: RedisClient, keys: QueueKeys, action: DeadLetterAction, which: { all: number } | { values: Buffer[] }, stream = false,
): Promise<number> {
  const args = "all" in which ? ["all", which.all] : ["values", ...which.values];
  return (await call(client, "syDeadLetters", [keys.deadLetter, keys.queue, stream && action === "requeue" ? "requeue-stream" : action, ...args]).catch(
    refusedType(client, keys.queue),
  )) as number;
}

/** How declare.lua answered. */
export type DeclareResult =
  | { result: "ok"; version: number }
  | { result: "exists"; stored: string }
  | { result: "changed" }
  | { result: "clash"; key: string; owner: string };

/**
 * declare.lua: stores declaration `json` of `name` with the ownership of `keys`,
 * if the stored one is still `replaces` ("" : if there is none), and announces it on `channel`.
 */
export async function declareQueue(
  client: RedisClient, system: SystemKeys, name: string, json: string, replaces: string, keys: readonly string[],
): Promise<DeclareResult> {
  const keysAndArgs = [system.queues, system.queueKeys, system.queuesVersion, name, json, replaces, system.events, ...keys];
  const [result, a, b] = (await call(client, "syDeclare", keysAndArgs)) as [string, string | number, string];
  if (result === "exists") return { result, stored: String(a) };
  if (result === "clash") return { result, key: String(a), owner: b };
  if (result === "ok") return { result, version: Number(a) };
  return { result: "changed" };
}

/**
 * undeclare.lua: removes declaration `name`, if it is still of `incarnation`, and its keys'
 * ownership, and announces it; the change's version, or 0 when it was not declared (so).
 */
export async function undeclareQueue(
  client: RedisClient, system: SystemKeys, name: string, incarnation: string, keys: readonly string[],
): Promise<number> {
  return Number(await call(client, "syUndeclare", [system.queues, system.queueKeys, system.queuesVersion, name, system.events, incarnation, ...keys]));
}

/** read-declaration.lua: declaration `name` as stored now (or null), with the version counter. */
export async function readDeclaration(client: RedisClient, system: SystemKeys, name: string): Promise<{ version: number; stored: string | null }> {
  const [version, stored] = (await call(client, "syReadDeclaration", [system.queuesVersion, system.queues, name])) as (string | null)[];
  return { version: Number(version ?? 0), stored };
}

/** read-declaration.lua without a name: every stored declaration (name → JSON), with the version counter. */
export async function readDeclarations(client: RedisClient, system: SystemKeys): Promise<{ version: number; all: Map<string, string> }> {
  const [version, flat] = (await call(client, "syReadDeclaration", [system.queuesVersion, system.queues])) as [string | null, string[]];
  const all = new Map<string, string>();
  for (let i = 0; i < flat.length; i += 2) all.set(flat[i], flat[i + 1]);
  return { version: Number(version ?? 0), all };
}

/** A delivery recorded by the lease script: the stored value and its fence. */
export interface LeasedItem {
  value: Buffer;
  fence: number;
}

/** A second key of the same slot, for a script argument that a queue without that key leaves unused. */
const unused = (keys: QueueKeys) => keys.leases;

/** A retry policy as the scripts take it. */
export function policyArg(p: { initialMs: number; multiplier: number; maxMs: number; jitter: number }): string {
  return `${p.initialMs},${p.multiplier},${p.maxMs},${p.jitter}`;
}

/** lease.lua: moves up to `max` items of a reliable queue into processing and records each delivery for `owner`. */
export async function leaseItems(
  client: RedisClient,
  keys: QueueKeys,
  lease: { now: number; max: number; recoveryTtlMs: number; owner: string },
): Promise<LeasedItem[]> {
  const flat = (await call(client, "syLeaseBuffer", [
    keys.queue, keys.processing, keys.leases, keys.fence, keys.recovery || unused(keys),
    lease.now, lease.max, keys.recovery ? "1" : "0", lease.recoveryTtlMs, lease.owner,
  ]).catch(refusedType(client, keys.queue))) as (Buffer | number)[];
  return leasedItems(flat);
}

/**
 * push-lease.lua: pushItems without a wait, then leaseItems for `lease.max`
 * items, in one call (one round trip). A push refused (the queue key of
 * another type, Redis out of memory) refuses the whole call, leasing nothing;
 * a lease that fails after the push was written comes back as its Error in
 * `leased`, beside the list's length.
 *
 * The values go out framed as they are (FramedCommand), as EVALSHA; when
 * Redis does not have the script (NOSCRIPT: it ran nothing), once more as
 * EVAL with its text, which loads it.
 */
export async function pushAndLease(
  client: RedisClient, keys: QueueKeys, ttlMs: number, values: readonly BulkStrings[], lease: { now: number; max: number; recoveryTtlMs: number; owner: string },
): Promise<{ length: number; leased: LeasedItem[] | Error }> {
  const send = (command: FramedCommand) => {
    client.sendCommand(command);
    return command.promise as Promise<[number, (Buffer | number)[] | Error]>;
  };
  try {
    const [length, flat] = await send(pushLeaseCommand(keys, ttlMs, values, lease)).catch((err: unknown) =>
      err instanceof Error && err.message.startsWith("NOSCRIPT") ? send(pushLeaseCommand(keys, ttlMs, values, lease, "eval")) : Promise.reject(err));
    // The push stands even when the lease after it failed: that error is the lease's alone.
    return { length, leased: flat instanceof Error ? await typedError(client, keys.queue, flat) : leasedItems(flat) };
  } catch (err) {
    throw await notAList(client, keys.queue, err);
  }
}

/** pushAndLease's command: EVALSHA, or EVAL with the script's text (which loads it). */
export function pushLeaseCommand(
  keys: QueueKeys, ttlMs: number, values: readonly BulkStrings[], lease: { now: number; max: number; recoveryTtlMs: number; owner: string }, as: "evalsha" | "eval" = "evalsha",
): FramedCommand {
  const { head, tail } = pushLeaseArgs(keys, lease.recoveryTtlMs, lease.owner);
  const numbers = [ttlMs, lease.now, lease.max];
  if (as === "evalsha") return FramedCommand.kept(head, numbers, tail, values);
  return FramedCommand.of("eval", [pushLeaseLua, ...head.args.slice(2), ...numbers, ...tail.args], values);
}

/**
 * push-lease.lua's EVALSHA as pushAndLease sends it: the head (EVALSHA, the
 * sha, the keys) and the tail (the queue's settings and the owner) framed
 * once per queue, the three numbers between them (ttl, now, max) on each call.
 */
interface PushLeaseArgs {
  head: FramedArgs;
  tail: FramedArgs;
  recoveryTtlMs: number;
  owner: string;
}

const pushLeaseKept = new WeakMap<QueueKeys, PushLeaseArgs>();

function pushLeaseArgs(keys: QueueKeys, recoveryTtlMs: number, owner: string): PushLeaseArgs {
  let kept = pushLeaseKept.get(keys);
  if (!kept || kept.recoveryTtlMs !== recoveryTtlMs || kept.owner !== owner) {
    const head = new FramedArgs(["evalsha", pushLeaseSha, "5", keys.queue, keys.processing, keys.leases, keys.fence, keys.recovery || unused(keys)]);
    kept = { head, tail: new FramedArgs([keys.recovery ? "1" : "0", String(recoveryTtlMs), owner]), recoveryTtlMs, owner };
    pushLeaseKept.set(keys, kept);
  }
  return kept;
}

/**
 * Room in front of a push's values for the head of the command that sends
 * them onto the queue of `keys`, an LPUSH or push-lease.lua's EVALSHA, so
 * either is written without a copy of the values (FramedCommand).
 */
export function pushRoom(keys: QueueKeys, recoveryTtlMs: number, owner: string): number {
  const { head, tail } = pushLeaseArgs(keys, recoveryTtlMs, owner);
  // The count and the three numbers, each up to 16 digits: "*<count>\r\n", "$<digits>\r\n<n>\r\n".
  return Math.max(FramedCommand.lpushRoom(keys.queue), 1 + 10 + 2 + head.bytes.length + 3 * (1 + 2 + 2 + 16 + 2) + tail.bytes.length);
}

/** lease.lua's flat answer as items. */
function leasedItems(flat: readonly (Buffer | number)[]): LeasedItem[] {
  const items: LeasedItem[] = [];
  for (let i = 0; i < flat.length; i += 2) items.push({ value: flat[i] as Buffer, fence: Number(flat[i + 1]) });
  return items;
}

/** pop.lua: pops up to `max` items of a simple queue, numbered from its fence counter. */
export async function popItems(client: RedisClient, keys: QueueKeys, max: number): Promise<{ first: number; values: Buffer[] }> {
  const [first, ...values] = (await call(client, "syPopBuffer", [keys.queue, keys.fence, max])) as [Buffer | number, ...Buffer[]];
  return { first: Number(first), values };
}

/** What a settle does (settle.lua's actions). */
export type SettleAction = "ack" | "drop" | "retry" | "return" | "undo" | "kill" | "extend" | "check";

const actionLetters: Record<SettleAction, string> = {
  ack: "a", drop: "d", retry: "r", return: "b", undo: "u", kill: "k", extend: "x", check: "c",
};

/** One settle for {@link settleItems}: what, of which delivery ("<fence>@<owner>"). */
export interface SettleOp {
  action: SettleAction;
  delivery: string;
  /** retry, kill: why. */
  reason?: string;
  /** retry: the wait in ms instead of the policy's. */
  delayMs?: number;
  /** The lease token a worker settles with (not sent to Redis: see Queues.settling). */
  token?: string;
}

/** How settle.lua answered one settle. */
export type SettleCode = "done" | "dead_lettered" | "not_held" | "superseded" | "unknown";

const settleCodes: Record<number, SettleCode> = { 1: "done", 2: "dead_lettered", [-1]: "not_held", [-2]: "superseded", [-3]: "unknown" };

/** One settle's outcome: its code and, for a retry that applied, when the item is due (0: at once). */
export interface SettleResult {
  code: SettleCode;
  dueMs: number;
}

/** The queue's settings a settle or recovery needs. */
export interface SettleContext {
  now: number;
  maxDeliveries: number;
  retryPolicy: string;
  publishTtlMs: number;
  /** Stream queues: how long an entry stays pending before it is reclaimed. */
  minIdleMs?: number;
}

/** settle.lua: applies settles whose deliveries are live; one result per settle, in order. */
export async function settleItems(client: RedisClient, keys: QueueKeys, ctx: SettleContext, ops: readonly SettleOp[]): Promise<SettleResult[]> {
  const args = settleArgs(keys, ctx);
  pushOps(args, ops);
  return settleResults((await call(client, "sySettle", args).catch(refusedType(client, keys.queue))) as number[]);
}

/** A lease that follows settles in the same call (settle-lease.lua): lease.lua's arguments. */
export interface LeaseAfter {
  max: number;
  recoveryTtlMs: number;
  owner: string;
}

/**
 * settle-lease.lua: settleItems, then leaseItems for `lease.max` items, in one
 * call (one round trip). A settle refused for a key of another type refuses the
 * whole call, leasing nothing; a lease that fails after the settles applied
 * comes back as its Error in `leased`, beside their results.
 */
export async function settleAndLease(
  client: RedisClient, keys: QueueKeys, ctx: SettleContext, ops: readonly SettleOp[], lease: LeaseAfter,
): Promise<{ results: SettleResult[]; leased: LeasedItem[] | Error }> {
  const args: (string | number)[] = [...settleArgs(keys, ctx), lease.max, lease.recoveryTtlMs, lease.owner];
  pushOps(args, ops);
  const [settled, flat] = (await call(client, "sySettleLeaseBuffer", args).catch(refusedType(client, keys.queue))) as [number[], (Buffer | number)[] | Error];
  // The settles applied even when the lease after them failed: that error is the lease's alone.
  return { results: settleResults(settled), leased: flat instanceof Error ? await typedError(client, keys.queue, flat) : leasedItems(flat) };
}

/** settle.lua's keys and first six arguments. */
function settleArgs(keys: QueueKeys, ctx: SettleContext): (string | number)[] {
  return [
    keys.queue, keys.processing, keys.leases, keys.fence, keys.recovery || unused(keys), keys.deadLetter, keys.delayed, keys.returned,
    ctx.now, ctx.maxDeliveries, keys.recovery ? "1" : "0", ctx.retryPolicy, Math.random(), ctx.publishTtlMs,
  ];
}

/** settle.lua's quadruples: action, field, reason, delay. */
function pushOps(args: (string | number)[], ops: readonly SettleOp[]): void {
  for (const op of ops) args.push(actionLetters[op.action], op.delivery, op.reason ?? "", op.delayMs === undefined ? "" : Math.max(0, Math.round(op.delayMs)));
}

function settleResults(flat: readonly number[]): SettleResult[] {
  const results: SettleResult[] = [];
  for (let i = 0; i < flat.length; i += 2) results.push({ code: settleCodes[flat[i]], dueMs: Number(flat[i + 1]) });
  return results;
}

/** The consumer that entries handed back wait under until a pump reclaims them (stream-settle.lua). */
export const PARKING_CONSUMER = "switchyard.parked";

/** A stream delivery's settle field: "<entry id>@<delivery count>@<consumer>@<fence>@<group>" (the group last: it may hold "@"). */
export function streamDeliveryField(id: string, count: number, consumer: string, fence: number, group: string): string {
  return `${id}@${count}@${consumer}@${fence}@${group}`;
}

/**
 * stream-settle.lua: applies settles of a stream queue's deliveries that are
 * still live; one result per settle, in order (a retry's dueMs is when it is
 * reclaimed at the earliest).
 */
export async function settleStreamItems(client: RedisClient, keys: QueueKeys, ctx: SettleContext, ops: readonly SettleOp[]): Promise<SettleResult[]> {
  const args: (string | number)[] = [keys.queue, keys.deadLetter, keys.leases, ...streamSettleArgs(ctx)];
  pushStreamOps(args, ops);
  return streamSettleResults((await call(client, "syStreamSettle", args).catch(refusedType(client, keys.queue))) as number[], ctx, ops);
}

/**
 * stream-settle-lease.lua: settleStreamItems, then leaseStreamEntries, in one
 * call (one round trip). A lease that fails after the settles applied comes
 * back as its Error in `leased`, beside their results.
 */
export async function settleStreamAndLease(
  client: RedisClient, keys: QueueKeys, ctx: SettleContext, ops: readonly SettleOp[], lease: StreamLeaseArgs,
): Promise<{ results: SettleResult[]; leased: StreamLease | Error }> {
  const args: (string | number)[] = [keys.queue, keys.fence, keys.deadLetter, keys.leases, ...streamSettleArgs(ctx), ...streamLeaseArgs(lease)];
  pushStreamOps(args, ops);
  const [settled, leased] = (await call(client, "syStreamSettleLeaseBuffer", args).catch(refusedType(client, keys.queue))) as [(number | Buffer)[], RawStreamLease | Error];
  // The settles applied even when the lease after them failed: that error is the lease's alone.
  return {
    results: streamSettleResults(settled.map(Number), ctx, ops),
    leased: leased instanceof Error ? await typedError(client, keys.queue, leased) : streamLeaseOf(leased),
  };
}

/** stream-settle.lua's ARGV[1..5]. */
function streamSettleArgs(ctx: SettleContext): (string | number)[] {
  return [ctx.maxDeliveries, ctx.minIdleMs ?? 0, ctx.retryPolicy, Math.random(), PARKING_CONSUMER];
}

/** stream-settle.lua's octuples: action, group, id, delivery count, consumer, fence, reason, delay. */
function pushStreamOps(args: (string | number)[], ops: readonly SettleOp[]): void {
  for (const op of ops) {
    const [id, count, consumer, fence] = op.delivery.split("@", 4);
    const group = op.delivery.slice(id.length + count.length + consumer.length + fence.length + 4);
    args.push(actionLetters[op.action], group, id, count, consumer, fence, op.reason ?? "", op.delayMs === undefined ? "" : Math.max(0, Math.round(op.delayMs)));
  }
}

function streamSettleResults(flat: readonly number[], ctx: SettleContext, ops: readonly SettleOp[]): SettleResult[] {
  const results: SettleResult[] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const code = settleCodes[flat[i]];
    results.push({ code, dueMs: code === "done" && ops[i / 2].action === "retry" ? ctx.now + flat[i + 1] : 0 });
  }
  return results;
}

/** stream-retire.lua: deletes `consumer` of `group` if it holds no pending entry; true when deleted. */
export async function retireConsumer(client: RedisClient, stream: string, group: string, consumer: string): Promise<boolean> {
  return (await call(client, "syStreamRetire", [stream, group, consumer])) === 1;
}

/**
 * stream-group-delete.lua, called until done: destroys `group` and deletes its pending entries' records from
 * the counts hash, 1,000 entries a call (a group with a long pending list does not hold Redis for long).
 */
export async function deleteStreamGroup(client: RedisClient, keys: QueueKeys, group: string, options: { dropEmptyStream?: boolean } = {}): Promise<void> {
  const args = [keys.queue, keys.leases, group, 1000, options.dropEmptyStream ? "drop" : ""];
  while ((await call(client, "syStreamGroupDelete", args).catch(refusedType(client, keys.queue))) !== 1);
}

/**
 * stream-rebase.lua over every page: moves the due times of `group`'s handed-back entries by `deltaMs`
 * (a min_idle changed by as much), so each stays due when it was.
 */
export async function rebaseParked(client: RedisClient, keys: QueueKeys, group: string, deltaMs: number): Promise<void> {
  for (let from = "-"; from !== ""; ) {
    from = String(await call(client, "syStreamRebase", [keys.queue, keys.leases, group, PARKING_CONSUMER, deltaMs, from, 1000]));
  }
}

/**
 * stream-restore.lua: creates the declared groups Redis lacks (from "0" rather than "$" on a stream left with none);
 * whether it made the stream key, and the groups it created.
 */
export async function restoreGroups(
  client: RedisClient, stream: string, groups: readonly { name: string; startId: string }[],
): Promise<{ madeStream: boolean; created: string[] }> {
  const [made, ...created] = (await call(client, "syStreamRestore", [stream, ...groups.flatMap((g) => [g.name, g.startId])])) as [number, ...string[]];
  return { madeStream: made === 1, created: created.map(String) };
}

/** One entry stream-lease.lua delivered. */
export interface StreamEntry {
  id: string;
  /** This delivery's number (the group's delivery count). */
  count: number;
  /** Why its previous delivery failed ("" for none). */
  lastError: string;
  /** Field, value, field, value, ... */
  fields: Buffer[];
}

/** What one stream-lease.lua call answered. */
export interface StreamLease {
  cursor: string;
  firstFence: number;
  deadLettered: number;
  /** The id to wait after for more entries ("" : the group may have more now). */
  wakeId: string;
  /** Pending entries the call found trimmed from the stream (by its trimming policy): lost to the group. */
  trimmed: number;
  entries: StreamEntry[];
}

/** stream-lease.lua's arguments: which group reads, as which consumer, how many at most, and where its reclaim scan stands. */
export interface StreamLeaseArgs {
  group: string;
  consumer: string;
  max: number;
  minIdleMs: number;
  maxDeliveries: number;
  cursor: string;
  /** Entry ids this instance handed back (retry, a closed stream), claimed first if still parked and due. */
  handedBack: readonly string[];
}

function streamLeaseArgs(lease: StreamLeaseArgs): (string | number)[] {
  return [lease.group, lease.consumer, lease.max, lease.minIdleMs, lease.maxDeliveries, lease.cursor, lease.handedBack.join(",")];
}

/** stream-lease.lua's answer as Redis sends it. */
type RawStreamLease = [Buffer, number, number, Buffer, number, ...[Buffer, number, Buffer, Buffer[]][]];

/**
 * stream-lease.lua: reclaims entries of `group` handed back and due, then idle ones (dead-lettering those
 * past max deliveries), then reads new ones, up to `max`.
 */
export async function leaseStreamEntries(client: RedisClient, keys: QueueKeys, lease: StreamLeaseArgs): Promise<StreamLease> {
  const raw = (await call(client, "syStreamLeaseBuffer", [keys.queue, keys.fence, keys.deadLetter, keys.leases, ...streamLeaseArgs(lease), PARKING_CONSUMER])
    .catch(refusedType(client, keys.queue))) as RawStreamLease;
  return streamLeaseOf(raw);
}

function streamLeaseOf([cursor, first, dead, wake, trimmed, ...entries]: RawStreamLease): StreamLease {
  return {
    cursor: cursor.toString(),
    firstFence: Number(first),
    deadLettered: Number(dead),
    wakeId: wake.toString(),
    trimmed: Number(trimmed),
    entries: entries.map(([id, count, err, fields]) => ({ id: id.toString(), count: Number(count), lastError: err.toString(), fields })),
  };
}

/** What one recover.lua call did. */
export interface RecoverResult {
  recovered: number;
  deadLettered: number;
  /** Stale claims read (below the limit: none left). */
  seen: number;
  /** When the earliest item it delayed is due (0: none delayed). */
  earliestDueMs: number;
}

/** recover.lua: takes back claims idle longer than `minIdleMs`, at most `limit` per call. */
export async function recoverStale(
  client: RedisClient, keys: QueueKeys, ctx: SettleContext & { minIdleMs: number; limit: number; reason: string },
): Promise<RecoverResult> {
  const [recovered, deadLettered, seen, earliestDueMs] = (await call(client, "syRecover", [
    keys.queue, keys.processing, keys.leases, keys.recovery, keys.deadLetter, keys.delayed, keys.returned,
    ctx.now, ctx.minIdleMs, ctx.limit, ctx.maxDeliveries, ctx.retryPolicy, Math.random(), ctx.reason, ctx.publishTtlMs,
  ]).catch(refusedType(client, keys.queue))) as number[];
  return { recovered, deadLettered, seen, earliestDueMs };
}

/** adopt.lua: gives a delivery and a claim to processing items no live delivery accounts for. */
export async function adoptOrphans(client: RedisClient, keys: QueueKeys, now: number, maxRead: number): Promise<{ added: number; length: number }> {
  const [added, length] = (await call(client, "syAdopt", [keys.processing, keys.leases, keys.fence, keys.recovery, now, maxRead])) as number[];
  return { added, length };
}

/** promote.lua: moves up to `limit` due items of a delayed set onto the queue; resolves to how many, and when the next is due (0: none). */
export async function promoteDue(
  client: RedisClient, keys: QueueKeys, now: number, limit: number, publishTtlMs: number,
): Promise<{ moved: number; nextDueMs: number }> {
  const [moved, nextDueMs] = (await call(client, "syPromote", [keys.delayed, keys.queue, now, limit, publishTtlMs]).catch(refusedType(client, keys.queue))) as number[];
  return { moved, nextDueMs };
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
