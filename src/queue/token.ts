/**
 * Lease tokens: opaque to workers, they name one delivery. A token carries the
 * queue, the fence number of that delivery and, for reliable queues, the
 * instance that leased it: together the delivery's record in Redis, which any
 * instance can find.
 */
import { SwitchyardError } from "../errors.js";
import { streamDeliveryField } from "../redis/scripts.js";

/** A stream queue's delivery: the entry, its group, and its delivery count (with the token's fence, what the pending entry is checked against). */
export interface EntryRef {
  group: string;
  id: string;
  count: number;
}

/** What a lease token names. */
export interface LeaseRef {
  queue: string;
  fence: number;
  /** The leasing instance's id (for a stream, its consumer); "" for a simple queue's delivery (nothing to settle). */
  owner: string;
  /** Stream queues only. */
  entry?: EntryRef;
  /** A simple queue's delivery while its stream holds it: the item as popped, for a release to push back. */
  popped?: Buffer;
  /** A simple queue's delivery: when it was popped (a record of a settle made before it is not of this delivery). */
  poppedMs?: number;
}

/** The mode of the queue a token's delivery came from. */
export function tokenMode(ref: LeaseRef): "simple" | "reliable" | "stream" {
  return ref.entry ? "stream" : ref.owner ? "reliable" : "simple";
}

/** The field of a reliable delivery's record in its queue's leases hash; of a stream's, what stream-settle.lua checks. */
export function deliveryField(ref: LeaseRef): string {
  if (ref.entry) return streamDeliveryField(ref.entry.id, ref.entry.count, ref.owner, ref.fence, ref.entry.group);
  return `${ref.fence}@${ref.owner}`;
}

/** The token of a stream delivery. Format: `x.<fence>.<consumer>.<count>.<entry id>.<group b64url>.<queue b64url>`. */
export function streamTokenFormatter(queue: string, group: string): (fence: number, owner: string, id: string, count: number) => string {
  const tail = `${Buffer.from(group).toString("base64url")}.${Buffer.from(queue).toString("base64url")}`;
  return (fence, owner, id, count) => `x.${fence}.${owner}.${count}.${id}.${tail}`;
}

/** The token for a delivery. Format: `r.<fence>.<owner>.<queue b64url>` or `s.<fence>.<queue b64url>`. */
export function formatToken(ref: LeaseRef): string {
  return tokenFormatter(ref.queue)(ref.fence, ref.owner);
}

/** formatToken for the deliveries of one queue: encodes the queue's name once, not per token. */
export function tokenFormatter(queue: string): (fence: number, owner: string) => string {
  const name = Buffer.from(queue).toString("base64url");
  return (fence, owner) => (owner ? `r.${fence}.${owner}.${name}` : `s.${fence}.${name}`);
}

const reliable = /^r\.(\d{1,16})\.([0-9a-z]{10})\.([A-Za-z0-9_-]+)$/;
const simple = /^s\.(\d{1,16})\.([A-Za-z0-9_-]+)$/;
const stream = /^x\.(\d{1,16})\.([0-9a-z]{10})\.(\d{1,10})\.(\d{1,20}-\d{1,20})\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/;

/** Parses a token; INVALID_ARGUMENT when it is not one Switchyard issued. */
export function parseToken(token: string): LeaseRef {
  let m = reliable.exec(token);
  if (m) return { fence: Number(m[1]), owner: m[2], queue: Buffer.from(m[3], "base64url").toString() };
  m = stream.exec(token);
  if (m) {
    const entry = { count: Number(m[3]), id: m[4], group: Buffer.from(m[5], "base64url").toString() };
    return { fence: Number(m[1]), owner: m[2], queue: Buffer.from(m[6], "base64url").toString(), entry };
  }
  m = simple.exec(token);
  if (m) return { fence: Number(m[1]), owner: "", queue: Buffer.from(m[2], "base64url").toString() };
  throw new SwitchyardError(
    "invalid_argument",
    token ? "lease_token is malformed; pass the lease_token of a delivery unchanged" : "lease_token is required",
    { reason: "LEASE_TOKEN_INVALID", violations: [{ field: "lease_token", description: token ? "malformed" : "required" }] },
  );
}
