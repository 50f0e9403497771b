/**
 * The instances serving queues on one Redis, and what becomes of a dead one's
 * deliveries. Every delivery's record names the instance that leased it (its
 * owner). Each instance beats its heart into one sorted set; an instance
 * silent longer than the timeout is dead, and one live instance returns every
 * delivery the dead one still owned to the front of its queue, as a closed
 * stream's are. So no item stays in a processing list without a holder, with
 * or without a recovery set: not after a crash, not after a return that Redis
 * could not take.
 *
 * The same scan serves a live instance that lost track of deliveries of its own
 * (a lease call whose answer never came): `orphans` lists its records that no
 * stream of it holds.
 */
import { randomBytes } from "node:crypto";
import type { Clock } from "../clock.js";
import type { RedisClient } from "../redis/connection.js";
import type { SystemKeys } from "../redis/keys.js";

/** How long one instance takes to return a dead instance's deliveries, at most, before another may. */
const REAP_LOCK_MS = 60_000;
/** Records read per HSCAN call. */
const SCAN_COUNT = 1000;

/** A new instance id: 10 lowercase base-36 characters, safe in lease tokens and HSCAN patterns. */
function newInstanceId(): string {
  return randomBytes(6).readUIntBE(0, 6).toString(36).padStart(10, "0");
}

export class Instances {
  /** This instance's id: the owner in its deliveries' records and tokens. */
  readonly id = newInstanceId();

  constructor(
    private readonly client: RedisClient,
    private readonly keys: SystemKeys,
    private readonly clock: Clock,
    /** Silence after which an instance counts as dead. */
    readonly timeoutMs: number,
  ) {}

  /** Records that this instance is alive, now. */
  async beat(): Promise<void> {
    await this.client.zadd(this.keys.alive, this.clock.now(), this.id);
  }

  /** Leaves the set of live instances (after a shutdown returned everything this instance held). */
  async leave(): Promise<void> {
    await this.client.zrem(this.keys.alive, this.id);
  }

  /** Ids of instances silent longer than the timeout, for each of which this instance took the right to reap. */
  async claimDead(): Promise<string[]> {
    const silent = await this.client.zrangebyscore(this.keys.alive, "-inf", this.clock.now() - this.timeoutMs);
    const mine: string[] = [];
    for (const id of silent) {
      if (id === this.id) continue;
      if (await this.client.set(this.keys.reaping(id), this.id, "PX", REAP_LOCK_MS, "NX")) mine.push(id);
    }
    return mine;
  }

  /**
   * Forgets dead instance `id` once its deliveries are returned, unless it beat
   * its heart again meanwhile (it was only cut off: it comes back with its tokens
   * superseded).
   */
  async forget(id: string): Promise<void> {
    const score = await this.client.zscore(this.keys.alive, id);
    if (score !== null && Number(score) <= this.clock.now() - this.timeoutMs) await this.client.zrem(this.keys.alive, id);
    await this.client.del(this.keys.reaping(id));
  }

  /** The fields of the deliveries `owner` holds in a leases hash, in pages (HSCAN, so a large hash never blocks Redis). */
  async *deliveriesOf(leases: string, owner: string): AsyncGenerator<string[]> {
    let cursor = "0";
    do {
      // As buffers: the records' values (the items) are read too, and need no decoding.
      const [next, flat] = await this.client.hscanBuffer(leases, cursor, "MATCH", `*@${owner}`, "COUNT", SCAN_COUNT);
      cursor = next.toString();
      const fields: string[] = [];
      for (let i = 0; i < flat.length; i += 2) fields.push(flat[i].toString());
      if (fields.length > 0) yield fields;
    } while (cursor !== "0");
  }
}
