/**
 * Lease tokens: opaque to workers, they name one delivery. A token carries the
 * queue, the fence number of that delivery and, for reliable queues, the sha1
 * of the item, which is how the lease is found in Redis from any instance.
 */
import { SwitchyardError } from "../errors.js";

/** What a lease token names. */
export interface LeaseRef {
  queue: string;
  fence: number;
  /** "" for a simple queue's delivery (nothing to settle). */
  sha: string;
}

/** The token for a delivery. Format: `r.<fence>.<sha1>.<queue b64url>` or `s.<fence>.<queue b64url>`. */
export function formatToken(ref: LeaseRef): string {
  return tokenFormatter(ref.queue)(ref.fence, ref.sha);
}

/** formatToken for the deliveries of one queue: encodes the queue's name once, not per token. */
export function tokenFormatter(queue: string): (fence: number, sha: string) => string {
  const name = Buffer.from(queue).toString("base64url");
  return (fence, sha) => (sha ? `r.${fence}.${sha}.${name}` : `s.${fence}.${name}`);
}

const reliable = /^r\.(\d{1,16})\.([0-9a-f]{40})\.([A-Za-z0-9_-]+)$/;
const simple = /^s\.(\d{1,16})\.([A-Za-z0-9_-]+)$/;

/** Parses a token; INVALID_ARGUMENT when it is not one Switchyard issued. */
export function parseToken(token: string): LeaseRef {
  let m = reliable.exec(token);
  if (m) return { fence: Number(m[1]), sha: m[2], queue: Buffer.from(m[3], "base64url").toString() };
  m = simple.exec(token);
  if (m) return { fence: Number(m[1]), sha: "", queue: Buffer.from(m[2], "base64url").toString() };
  throw new SwitchyardError(
    "invalid_argument",
    token ? "lease_token is malformed; pass the lease_token of a delivery unchanged" : "lease_token is required",
  );
}
