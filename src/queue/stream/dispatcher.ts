/**
 * Serves the lease streams of one consumer group of a STREAM queue on this
 * instance: one pump, reading as one consumer (the instance's id), fanned in
 * to the group's streams like a list's (see ../dispatcher.ts).
 *
 * Each lease call (stream-lease.lua) first reclaims entries handed back by
 * retry or a closed stream, once due, from the parking consumer's own pending
 * list, by the ids this instance handed back; then entries idle in the group's
 * pending list longer than min_idle (XAUTOCLAIM from a cursor kept here:
 * entries of a stopped worker or instance, and those handed back elsewhere or
 * due later); then reads new ones (XREADGROUP). A handback makes the pump
 * lease at once (as a push does). While there is nothing, the pump waits with
 * `XREAD BLOCK` after the group's last delivered id: it reads without taking,
 * so a wake-up lost loses nothing. It waits at most min_idle, so idle entries
 * are reclaimed within about twice min_idle. A lease call whose answer is lost
 * (a cut connection) leaves its entries pending under this instance's
 * consumer: they are reclaimed once idle for min_idle, as a crashed instance's.
 * A lease call that finds the group gone (the stream expired by its publish
 * TTL, or was deleted) creates the groups declared now again (stream-restore.lua):
 * as Redis holds the declaration, not as this instance last heard of it, so a
 * group deleted by DeleteConsumerGroup stays deleted.
 */
import { SwitchyardError } from "../../errors.js";
import type { RedisClient } from "../../redis/connection.js";
import { deleteStreamGroup, leaseStreamEntries, restoreGroups, retireConsumer, type StreamLease, type StreamLeaseArgs } from "../../redis/scripts.js";
import { keysOf, type QueueConfig } from "../declaration.js";
import { QueueDispatcher, type DispatchHost, type Taken } from "../dispatcher.js";
import type { LeaseBeside } from "../settler.js";
import { streamTokenFormatter, type LeaseRef } from "../token.js";
import { compareIds, entryItem } from "./entries.js";

/** An entry id as Redis writes one. */
const ENTRY_ID = /^\d+-\d+$/;

export class StreamDispatcher extends QueueDispatcher {
  /** Where the next reclaim (XAUTOCLAIM) of idle entries goes on in the group's pending list. */
  private cursor = "0-0";
  /** Entries this instance handed back that no lease call has looked for yet (their ids). */
  private handedBackIds = new Set<string>();
  private wakeId = "$";
  private readonly streamToken: ReturnType<typeof streamTokenFormatter>;

  constructor(
    config: QueueConfig,
    host: DispatchHost,
    readonly group: string,
    /** Told how many entries a lease call dead-lettered. */
    private readonly onDeadLettered: (n: number) => void,
    /** Told how many pending entries a lease call found trimmed from the stream. */
    private readonly onTrimmed: (n: number) => void,
  ) {
    super(config, host);
    this.streamToken = streamTokenFormatter(config.name, group);
  }

  protected override take(max: number): Promise<Taken[]> {
    return this.read((args) => leaseStreamEntries(this.host.redis.client, keysOf(this.config), args), max);
  }

  /** take(), riding settles of this queue in their call (stream-settle-lease.lua). */
  protected override takeBeside(max: number, send: LeaseBeside): Promise<Taken[]> {
    return this.read((args) => send.stream(args), max);
  }

  /** One lease call for up to `max` entries, made by `call`; its answer moves the reclaim cursor and the wake id. */
  private async read(call: (args: StreamLeaseArgs) => Promise<StreamLease>, max: number): Promise<Taken[]> {
    const { config, host, group } = this;
    // The lease call looks for the first `max` of them in the stream's order (the order the reclaim
    // would find them in); one not due yet is left to the reclaim, as any other.
    const handedBack = this.handedBackIds.size === 0 ? [] : [...this.handedBackIds].sort(compareIds).slice(0, max);
    for (const id of handedBack) this.handedBackIds.delete(id);
    let lease;
    try {
      lease = await call({
        group, consumer: host.owner, max, minIdleMs: config.minIdleMs, maxDeliveries: config.maxDeliveries, cursor: this.cursor, handedBack,
      });
    } catch (err) {
      // Its outcome unknown, the ids it carried are looked for again by the next call (one that claimed them
      // took them out of the parking consumer's list: the next finds them no longer parked, and skips them).
      for (const id of handedBack) this.handedBackIds.add(id);
      // The group or the stream is gone (expired by its publish TTL, deleted): create the declared groups again.
      if (err instanceof Error && err.message.includes("NOGROUP")) await this.restore();
      throw err;
    }
    this.cursor = lease.cursor;
    // More handed back than this call could take: the pump leases again rather than waiting.
    if (this.handedBackIds.size > 0) this.pushed();
    if (lease.wakeId) this.wakeId = lease.wakeId;
    if (lease.deadLettered > 0) this.onDeadLettered(lease.deadLettered);
    if (lease.trimmed > 0) this.onTrimmed(lease.trimmed);
    return lease.entries.map((e, i) => ({
      ref: { queue: config.name, fence: lease.firstFence + i, owner: host.owner, entry: { group, id: e.id, count: e.count } },
      item: entryItem(e.id, e.fields, e.count - 1, e.lastError),
    }));
  }

  /**
   * Creates the groups the queue declares now again. A DeleteConsumerGroup
   * elsewhere takes its group out of the declaration and then destroys it, and
   * a DeleteQueue undeclares the queue and then purges its keys: one that did
   * so between the read here and the restore would leave what the restore
   * made. So what the declaration has lost by the read after is undone: a
   * group deleted since is deleted again (with its pending records, as
   * DeleteConsumerGroup does), and on a queue deleted since the groups the
   * restore created go, and the stream key too if the restore made it and it
   * is still empty.
   */
  private async restore(): Promise<void> {
    const { host } = this;
    const { name } = this.config;
    const now = await host.current(name).catch(() => undefined);
    if (now?.mode !== "stream") return; // deleted (its delete ends the streams), or another queue now
    const made = await restoreGroups(host.redis.client, name, now.groups);
    const after = await host.current(name).catch((err: unknown) => (err instanceof SwitchyardError && err.code === "not_found" ? null : undefined));
    if (after === undefined) return; // Redis could not say
    const keys = keysOf(now);
    if (after === null) {
      for (const [i, group] of made.created.entries()) {
        await deleteStreamGroup(host.redis.client, keys, group, { dropEmptyStream: made.madeStream && i === made.created.length - 1 });
      }
      return;
    }
    if (after.incarnation !== now.incarnation) return; // declared again: its groups are its own
    for (const g of now.groups) {
      if (!after.groups.some((a) => a.name === g.name)) await deleteStreamGroup(host.redis.client, keys, g.name);
    }
  }

  /**
   * Entries `ids` were handed back (a retry, a closed stream): the next lease
   * call claims those parked and due by id, so it finds them at once whatever
   * else the group's pending list holds, and the pump leases now.
   */
  handedBack(ids: readonly string[]): void {
    for (const id of ids) if (ENTRY_ID.test(id)) this.handedBackIds.add(id);
    this.pushed();
  }

  protected override wakeUp(blocker: RedisClient): Promise<unknown> {
    const blockMs = Math.max(1, Math.min(this.host.options.blockTimeoutSec * 1000, this.config.minIdleMs));
    return blocker.xread("COUNT", 1, "BLOCK", blockMs, "STREAMS", this.config.name, this.wakeId);
  }

  /** Once this instance stops: deletes its consumer from the group if it holds nothing (else another instance reclaims its entries). */
  async retire(): Promise<void> {
    await retireConsumer(this.host.redis.client, this.config.name, this.group, this.host.owner).catch((err: unknown) => {
      // The group or the stream was deleted meanwhile: nothing to retire.
      if (!(err instanceof Error && err.message.includes("NOGROUP"))) throw err;
    });
  }

  protected override tokenOf(ref: LeaseRef): string {
    return this.streamToken(ref.fence, ref.owner, ref.entry!.id, ref.entry!.count);
  }
}
