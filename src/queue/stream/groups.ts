/**
 * Consumer-group administration of STREAM queues: create (at a start
 * position: "$", "0" to replay, or an entry id), move, delete. The
 * declaration lists its groups, so every instance knows which a Lease may
 * name; Redis holds their positions and pending lists.
 */
import { SwitchyardError, invalid } from "../../errors.js";
import type { RedisClient } from "../../redis/connection.js";
import { deleteStreamGroup } from "../../redis/scripts.js";
import { checkGroup, keysOf, type QueueConfig } from "../declaration.js";
import type { QueueRegistry } from "../registry.js";
import { createGroup, groupNotFound, wrongType } from "./entries.js";

/** The declaration of a STREAM queue, or FAILED_PRECONDITION for a list queue. */
async function streamQueue(registry: QueueRegistry, name: string): Promise<QueueConfig> {
  const config = await registry.get(name);
  if (config.mode !== "stream") {
    throw new SwitchyardError("failed_precondition", `queue "${name}" is ${config.mode.toUpperCase()}; consumer groups belong to STREAM queues`, {
      reason: "WRONG_QUEUE_MODE", metadata: { queue: name },
    });
  }
  return config;
}

function groupExists(queue: string, group: string): SwitchyardError {
  return new SwitchyardError("already_exists", `STREAM queue "${queue}" has a consumer group "${group}" already; move it with SetConsumerGroupPosition`, {
    reason: "GROUP_EXISTS", metadata: { queue, group },
  });
}

/**
 * Creates a group at its start id and adds it to the declaration; GROUP_EXISTS if the declaration has it.
 * A group Redis has but the declaration lacks (made by another Redis client, or left by a delete whose
 * XGROUP DESTROY failed) is added at the position it has, as declaring a queue does: refusing it left a
 * group that could be neither created, moved, deleted nor read.
 */
export async function createConsumerGroup(registry: QueueRegistry, client: RedisClient, name: string, given: { name: string; startId?: string }): Promise<QueueConfig> {
  const config = await streamQueue(registry, name);
  const group = checkGroup(name, given, "group");
  if (config.groups.some((g) => g.name === group.name)) throw groupExists(name, group.name);
  await createGroup(client, name, group);
  return registry.update(name, (stored) => {
    if (stored.groups.some((g) => g.name === group.name)) throw groupExists(name, group.name);
    return { ...stored, groups: [...stored.groups, group] };
  });
}

/** Moves a group's position (XGROUP SETID): entries after `id` are delivered to it (again). */
export async function setConsumerGroupPosition(registry: QueueRegistry, client: RedisClient, name: string, group: string, id: string): Promise<void> {
  const config = await streamQueue(registry, name);
  if (!config.groups.some((g) => g.name === group)) throw groupNotFound(name, group);
  if (!id) throw invalid(`id is required: an entry id, "0" (replay everything) or "$" (skip to the end)`, "id");
  checkGroup(name, { name: group, startId: id }, "id");
  try {
    await client.xgroup("SETID", name, group, id);
  } catch (err) {
    if (err instanceof Error && /NOGROUP|no such key/i.test(err.message)) throw groupNotFound(name, group);
    throw wrongType(name, err as Error);
  }
}

/**
 * Deletes a group (XGROUP DESTROY, with its pending list, and its pending entries' records in the
 * counts hash, which their settles would have removed) and takes it out of the declaration.
 */
export async function deleteConsumerGroup(registry: QueueRegistry, client: RedisClient, name: string, group: string): Promise<QueueConfig> {
  const config = await streamQueue(registry, name);
  if (!config.groups.some((g) => g.name === group)) throw groupNotFound(name, group);
  const updated = await registry.update(name, (stored) => ({ ...stored, groups: stored.groups.filter((g) => g.name !== group) }));
  await deleteStreamGroup(client, keysOf(config), group).catch((err: Error) => Promise.reject(wrongType(name, err)));
  return updated;
}
