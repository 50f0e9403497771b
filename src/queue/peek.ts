/**
 * Reads items of a queue's ready or dead-letter list without moving them
 * (PeekQueue): what `switchyard queue peek-dead` shows.
 */
import { createHash } from "node:crypto";
import { SwitchyardError, invalid } from "../errors.js";
import type { RedisClient } from "../redis/connection.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { decodeItem, type Item } from "./envelope.js";

/** Which list to read. */
export type PeekList = "ready" | "dead_letter";

/** An item as it sits in a list, with the deliveries recorded for its value. */
export interface PeekedItem extends Item {
  deliveryCount: number;
}

/** Items returned when the request names no limit. */
export const DEFAULT_PEEK = 10;
/** The most items one peek returns (payloads may be up to SWITCHYARD_MAX_PAYLOAD_BYTES each). */
export const MAX_PEEK = 100;

/**
 * Up to `limit` items from the right end of the list (where items leave:
 * the next to lease, or the oldest dead letter) in that order, and the list's length.
 */
export async function peekItems(
  client: RedisClient,
  config: QueueConfig,
  list: PeekList,
  limit: number,
): Promise<{ items: PeekedItem[]; total: number }> {
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_PEEK) throw invalid(`limit must be between 0 and ${MAX_PEEK} (0 means ${DEFAULT_PEEK})`);
  const n = limit || DEFAULT_PEEK;
  const keys = keysOf(config);
  if (list === "dead_letter" && config.mode !== "reliable") {
    throw new SwitchyardError("failed_precondition", `queue "${config.name}" is SIMPLE and has no dead-letter list`);
  }
  const key = list === "ready" ? keys.queue : keys.deadLetter;
  const [values, total] = await Promise.all([client.lrangeBuffer(key, -n, -1), client.llen(key)]);
  values.reverse();
  let counts: (string | null)[] = values.map(() => null);
  if (config.mode === "reliable" && values.length > 0) {
    const shas = values.map((v) => createHash("sha1").update(v).digest("hex"));
    counts = await client.hmget(keys.deliveries, ...(list === "ready" ? shas : shas.map((sha) => `dead:${sha}`)));
  }
  return {
    items: values.map((v, i) => ({ ...decodeItem(v), deliveryCount: Number(counts[i] ?? 0) })),
    total,
  };
}
