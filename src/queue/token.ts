/**
 * Lease tokens: opaque to workers, they name one delivery. A token carries the
 * queue, the fence number of that delivery and, for reliable queues, the
 * instance that leased it: together the delivery's record in Redis, which any
 * instance can find.
 */
import { SwitchyardError } from "../errors.js";

/** What a lease token names. */
export interface LeaseRef {
  queue: string;
  fence: number;
  /** The leasing instance's id; "" for a simple queue's delivery (nothing to settle). */
  owner: string;
}

/** The field of a reliable delivery's record in its queue's leases hash. */
export function deliveryField(ref: LeaseRef): string {
  return `${ref.fence}@${ref.owner}`;
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

/** Parses a token; INVALID_ARGUMENT when it is not one Switchyard issued. */
export function parseToken(token: string): LeaseRef {
  let m = reliable.exec(token);
  if (m) return { fence: Number(m[1]), owner: m[2], queue: Buffer.from(m[3], "base64url").toString() };
  m = simple.exec(token);
  if (m) return { fence: Number(m[1]), owner: "", queue: Buffer.from(m[2], "base64url").toString() };
  throw new SwitchyardError(
    "invalid_argument",
    token ? "lease_token is malformed; pass the lease_token of a delivery unchanged" : "lease_token is required",
    { reason: "LEASE_TOKEN_INVALID", violations: [{ field: "lease_token", description: token ? "malformed" : "required" }] },
  );
}
