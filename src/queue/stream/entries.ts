/**
 * A STREAM queue's entries in Redis: appending them (XADD, trimmed by the
 * declaration's policy), reading them as items, and the consumer groups.
 *
 * An entry's field "payload" is the item's payload and every other field is
 * a header, so a plain `XADD uploads * payload …` (or any fields) from another
 * Redis client is an item as well. The entry id is the item id, and its time
 * the enqueue time. Of a field given twice the last value counts, as of a
 * protobuf map's key given twice (the dead letter, lib.lua's entry_envelope,
 * reads it the same way).
 */
import { SwitchyardError, invalid } from "../../errors.js";
import type { Clock } from "../../clock.js";
import { Command } from "ioredis";
import type { RedisClient } from "../../redis/connection.js";
import type { ConsumerGroupSpec, QueueConfig } from "../declaration.js";
import type { StoredItem } from "../envelope.js";
import type { NewItems } from "../new-items.js";
import { setHeader } from "../../wire/proto-reader.js";

/** The entry field holding the payload. */
export const PAYLOAD_FIELD = "payload";

/** The trimming arguments of an XADD under the queue's policy (approximate, as "~"). */
function trimArgs(config: QueueConfig, nowMs: number): (string | number)[] {
  const { maxLen, maxAgeMs } = config.streamTrim;
  if (maxLen > 0) return ["MAXLEN", "~", maxLen];
  if (maxAgeMs > 0) return ["MINID", "~", Math.max(0, nowMs - maxAgeMs)];
  return [];
}

/**
 * Appends items to a stream queue, in order, and answers their entry ids.
 * Delays and idempotency keys have no meaning on a stream: INVALID_ARGUMENT.
 * With `wait`, WAIT follows in the same pipeline (on the waiter connection,
 * which has no command timeout: each command carries its own) and `acked`
 * says how many replicas acknowledged.
 */
export async function appendEntries(
  client: RedisClient, clock: Clock, config: QueueConfig, items: NewItems, ttlMs: number,
  wait?: { replicas: number; timeoutMs: number; replyMs: number },
): Promise<{ ids: string[]; acked: number }> {
  if (items.hasOptions) {
    for (let i = 0; i < items.count; i++) {
      const o = items.options(i);
      if (o?.schedule || o?.idempotencyKey) {
        const which = o.schedule ? "delay/not_before" : "idempotency_key";
        throw new SwitchyardError("invalid_argument", `items[${i}].${which} is not supported on STREAM queue "${config.name}": entries are appended as they come`, {
          reason: "INVALID_FIELD", violations: [{ field: `items[${i}].${o.schedule ? "delay" : "idempotency_key"}`, description: "not supported on STREAM queues" }],
        });
      }
    }
  }
  const trim = trimArgs(config, clock.now());
  const commands: Command[] = [];
  for (let i = 0; i < items.count; i++) {
    const headers = items.headers(i);
    if (PAYLOAD_FIELD in headers) throw invalid(`items[${i}].headers has "${PAYLOAD_FIELD}", the entry field of the payload on a STREAM queue; rename that header`, `items[${i}].headers`);
    const payload = Buffer.alloc(items.payloadSize(i));
    items.copyPayload(i, payload, 0);
    const fields: (string | number | Buffer)[] = [config.name, ...trim, "*", PAYLOAD_FIELD, payload];
    for (const [k, v] of Object.entries(headers)) fields.push(k, v);
    commands.push(new Command("xadd", fields, { replyEncoding: "utf8" }));
  }
  if (ttlMs > 0) commands.push(new Command("pexpire", [config.name, Math.ceil(ttlMs)]));
  if (wait) commands.push(new Command("wait", [wait.replicas, wait.timeoutMs]));
  const pipeline = client.pipeline() as unknown as { sendCommand(c: Command): unknown; exec(): Promise<[Error | null, unknown][]> };
  for (const c of commands) {
    // A command's first timeout is the one it keeps (ioredis Command.setTimeout).
    if (wait) c.setTimeout(wait.timeoutMs + wait.replyMs);
    pipeline.sendCommand(c);
  }
  const answers = await pipeline.exec();
  const ids: string[] = [];
  for (const [err, id] of answers.slice(0, items.count)) {
    if (err) throw wrongType(config.name, err);
    ids.push(id as string);
  }
  const [waitError, acked] = wait ? answers[answers.length - 1] : [null, 0];
  if (waitError) throw waitError;
  return { ids, acked: acked as number };
}

/** FAILED_PRECONDITION (WRONG_KEY_TYPE) for Redis's WRONGTYPE on the stream's key; any other error as it is. */
export function wrongType(key: string, err: Error): Error {
  if (!err.message.startsWith("WRONGTYPE")) return err;
  return new SwitchyardError("failed_precondition", `key "${key}" is not a stream; delete or rename it before using it as a STREAM queue`, {
    reason: "WRONG_KEY_TYPE", metadata: { key },
  });
}

/** An entry's fields as an item (its id is the item id; its time the enqueue time). */
export function entryItem(id: string, fields: readonly Buffer[], deliveries: number, lastError: string): StoredItem {
  let payload: Uint8Array = Buffer.alloc(0);
  const headers: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i].toString();
    if (name === PAYLOAD_FIELD) payload = fields[i + 1];
    else setHeader(headers, name, fields[i + 1].toString());
  }
  return { id, payload, headers, enqueueTimeMs: Number(id.slice(0, id.indexOf("-"))), deliveries, lastError };
}

/** Creates a consumer group (and the stream) at its start id; false when it exists already (its position is left alone). */
export async function createGroup(client: RedisClient, key: string, group: ConsumerGroupSpec): Promise<boolean> {
  try {
    await client.xgroup("CREATE", key, group.name, group.startId, "MKSTREAM");
    return true;
  } catch (err) {
    if (err instanceof Error && err.message.startsWith("BUSYGROUP")) return false;
    throw wrongType(key, err as Error);
  }
}

/** Creates every declared group that Redis lacks (XGROUP CREATE … MKSTREAM). */
export async function ensureGroups(client: RedisClient, config: QueueConfig): Promise<void> {
  for (const g of config.groups) await createGroup(client, config.name, g);
}

/** NOT_FOUND for a group the queue does not declare. */
export function groupNotFound(queue: string, group: string): SwitchyardError {
  return new SwitchyardError("not_found", `STREAM queue "${queue}" has no consumer group "${group}"; declare it in the queue's groups or with CreateConsumerGroup`, {
    reason: "GROUP_NOT_FOUND", metadata: { queue, group },
  });
}

/** A consumer group as GetQueueStats shows it. */
export interface GroupStats {
  name: string;
  pending: number;
  /** Entries not yet delivered to the group (undefined when Redis cannot tell, after a deletion inside its range). */
  lag?: number;
  oldestPendingIdleMs?: number;
  consumers: number;
  lastDeliveredId: string;
}

/**
 * Stats of every consumer group of a stream (XINFO STREAM's last id, XINFO GROUPS, and XPENDING for
 * the oldest pending entry). A group deleted (or the stream) between those reads is left out: it is gone.
 */
export async function groupStats(client: RedisClient, key: string): Promise<GroupStats[]> {
  const gone = (err: Error) => (err.message.startsWith("NOGROUP") || /no such key/i.test(err.message) ? undefined : Promise.reject(wrongType(key, err)));
  const read = await client.pipeline().xinfo("STREAM", key).xinfo("GROUPS", key).exec();
  const [streamErr, stream] = read?.[0] ?? [];
  const [groupsErr, groups] = read?.[1] ?? [];
  if (streamErr || groupsErr) return (await gone((streamErr ?? groupsErr) as Error)) ?? [];
  const lastId = String(fieldsOf(stream as unknown[]).get("last-generated-id"));
  const stats = await Promise.all((groups as unknown[][]).map(async (flat): Promise<GroupStats | undefined> => {
    const info = fieldsOf(flat);
    const name = String(info.get("name"));
    const pending = Number(info.get("pending"));
    const lastDeliveredId = String(info.get("last-delivered-id"));
    let oldest: [string, string, number, number][] = [];
    if (pending > 0) {
      const read = await client.xpending(key, name, "-", "+", 1).catch(gone);
      if (read === undefined) return undefined;
      oldest = read as [string, string, number, number][];
    }
    const lag = info.get("lag");
    return {
      name,
      pending,
      // A group that has read up to the stream's last id (or was moved past it) has nothing left to read,
      // whatever Redis's estimate says (7.0 counts entries trimmed unread as lag for ever, and has none past the end).
      lag: compareIds(lastDeliveredId, lastId) >= 0 ? 0 : lag === null || lag === undefined ? undefined : Number(lag),
      oldestPendingIdleMs: oldest.length > 0 ? Number(oldest[0][2]) : undefined,
      consumers: Number(info.get("consumers")),
      lastDeliveredId,
    };
  }));
  return stats.filter((s): s is GroupStats => s !== undefined);
}

/** Orders two stream entry ids ("<ms>-<seq>", as Redis writes them: no leading zeros). */
export function compareIds(a: string, b: string): number {
  const [am, as = ""] = a.split("-");
  const [bm, bs = ""] = b.split("-");
  const cmp = (x: string, y: string) => x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
  return cmp(am, bm) || cmp(as, bs);
}

/** A flat [name, value, …] reply as a map. */
function fieldsOf(flat: unknown[]): Map<string, unknown> {
  const info = new Map<string, unknown>();
  for (let i = 0; i + 1 < flat.length; i += 2) info.set(String(flat[i]), flat[i + 1]);
  return info;
}
