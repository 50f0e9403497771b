/**
 * An operator's actions on a queue's lists (PurgeQueue, RequeueDeadLetters,
 * DeleteDeadLetters): what the dashboard's buttons do.
 */
import { SwitchyardError, invalid } from "../errors.js";
import type { RedisClient } from "../redis/connection.js";
import { settleDeadLetters, type DeadLetterAction } from "../redis/scripts.js";
import { keysOf, type QueueConfig } from "./declaration.js";
import { decodeItem } from "./envelope.js";

/** Which dead letters: by Switchyard item id, or all of them. */
export type DeadLetterSelection = { ids: readonly string[] } | { all: true };

/** The most ids one request may name. */
export const MAX_DEAD_LETTER_IDS = 1000;
/** Dead letters read per LRANGE while looking for ids, and moved per script call with `all`. */
const CHUNK = 1000;

/** Deletes the items waiting in the queue: its ready list and its delayed set; resolves to how many there were. */
export async function purgeReady(client: RedisClient, config: QueueConfig): Promise<number> {
  const { queue, delayed } = keysOf(config);
  // One transaction: both keys share the queue's slot.
  const result = await client.multi().llen(queue).zcard(delayed).del(queue, delayed).exec();
  const failed = result?.find(([err]) => err);
  if (!result || failed) throw failed?.[0] ?? new Error(`purge of "${queue}" was aborted`);
  return (result[0][1] as number) + (result[1][1] as number);
}

/** Checks a selection; INVALID_ARGUMENT saying what to fix. */
export function checkSelection(ids: readonly string[], all: boolean): DeadLetterSelection {
  if (all && ids.length > 0) throw invalid("give either ids or all, not both", "all");
  if (all) return { all: true };
  if (ids.length === 0) throw invalid("name the dead letters by ids (PeekQueue with list DEAD_LETTER shows them), or set all", "ids");
  if (ids.length > MAX_DEAD_LETTER_IDS) throw invalid(`at most ${MAX_DEAD_LETTER_IDS} ids per call; got ${ids.length}`, "ids");
  if (ids.some((id) => id === "")) throw invalid("ids must not be empty; raw dead letters have no id: use all", "ids");
  return { ids };
}

/** The stored values of the dead letters with these ids, read oldest first. */
async function valuesOf(client: RedisClient, list: string, ids: readonly string[]): Promise<Buffer[]> {
  const wanted = new Set(ids);
  const found: Buffer[] = [];
  for (let end = -1; wanted.size > 0; end -= CHUNK) {
    const chunk = await client.lrangeBuffer(list, end - CHUNK + 1, end);
    for (let i = chunk.length - 1; i >= 0; i--) {
      const id = decodeItem(chunk[i]).id;
      if (wanted.delete(id)) found.push(chunk[i]);
    }
    if (chunk.length < CHUNK) break;
  }
  return found;
}

/** Requeues or deletes dead letters; resolves to how many. */
export async function settleDeadLetterSelection(
  client: RedisClient, config: QueueConfig, action: DeadLetterAction, selection: DeadLetterSelection,
): Promise<number> {
  if (config.mode === "simple") {
    throw new SwitchyardError("failed_precondition", `queue "${config.name}" is SIMPLE and has no dead-letter list`, {
      reason: "WRONG_QUEUE_MODE",
      metadata: { queue: config.name },
    });
  }
  const keys = keysOf(config);
  if ("ids" in selection) {
    const values = await valuesOf(client, keys.deadLetter, selection.ids);
    return values.length === 0 ? 0 : settleDeadLetters(client, keys, action, { values }, config.mode === "stream");
  }
  let total = 0;
  for (;;) {
    const n = await settleDeadLetters(client, keys, action, { all: CHUNK }, config.mode === "stream");
    total += n;
    if (n < CHUNK) return total;
  }
}
