/**
 * Reads items of a queue's ready, dead-letter or delayed list without moving
 * them (PeekQueue): what `switchyard queue peek-dead` shows.
 */
import { SwitchyardError, invalid } from "../errors.js";
import type { RedisClient } from "../redis/connection.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { decodeItem, type Item } from "./envelope.js";

/** Which list to read. */
export type PeekList = "ready" | "dead_letter" | "delayed";

/** An item as it sits in a list, with its history. */
export interface PeekedItem extends Item {
  /** Deliveries so far (for a dead letter, those it had when it was dead-lettered). */
  deliveryCount: number;
  /** Why its last delivery failed ("" when none did). */
  lastError: string;
  /** Delayed items: when they become ready (ms). */
  notBeforeMs?: number;
}

/** Items returned when the request names no limit. */
export const DEFAULT_PEEK = 10;
/** The most items one peek returns (payloads may be up to SWITCHYARD_MAX_PAYLOAD_BYTES each). */
export const MAX_PEEK = 100;

function peeked(value: Buffer, notBeforeMs?: number): PeekedItem {
  const { deliveries, lastError, ...item } = decodeItem(value);
  return { ...item, deliveryCount: deliveries, lastError, notBeforeMs };
}

/**
 * Up to `limit` items in the order they leave: from the right end of a list
 * (the next to lease, or the oldest dead letter), or the delayed set's next
 * due first; and how many the list holds.
 */
export async function peekItems(
  client: RedisClient,
  config: QueueConfig,
  list: PeekList,
  limit: number,
): Promise<{ items: PeekedItem[]; total: number }> {
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_PEEK) throw invalid(`limit must be between 0 and ${MAX_PEEK} (0 means ${DEFAULT_PEEK})`, "limit");
  const n = limit || DEFAULT_PEEK;
  const keys = keysOf(config);
  if (list === "delayed") {
    const [flat, total] = await Promise.all([client.zrangeBuffer(keys.delayed, 0, n - 1, "WITHSCORES"), client.zcard(keys.delayed)]);
    const items: PeekedItem[] = [];
    for (let i = 0; i < flat.length; i += 2) items.push(peeked(flat[i], Number(flat[i + 1].toString())));
    return { items, total };
  }
  if (list === "dead_letter" && config.mode === "simple") {
    throw new SwitchyardError("failed_precondition", `queue "${config.name}" is SIMPLE and has no dead-letter list`, {
      reason: "WRONG_QUEUE_MODE",
      metadata: { queue: config.name },
    });
  }
  const key = list === "ready" ? keys.queue : keys.deadLetter;
  const [values, total] = await Promise.all([client.lrangeBuffer(key, -n, -1), client.llen(key)]);
  return { items: values.reverse().map((v) => peeked(v)), total };
}
