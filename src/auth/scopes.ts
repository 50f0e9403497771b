/**
 * Scopes: what a caller may do. A scope is a name from the seed's permission
 * list (`sys:job:list`, ...) or a queue scope (`queue:read`, `queue:admin`,
 * `queue:enqueue`, `queue:lease`) optionally limited to queue names by a pattern after a third
 * colon: `queue:lease:{thumbnails}` (exact) or `queue:enqueue:cache.*` (a glob,
 * `*` any run of characters, `?` one). `*` alone grants everything, and the
 * seed's `sys:job:*` every `sys:job:` scope (the seven job permissions).
 */
import { invalid } from "../errors.js";

/** Scopes without a queue pattern. */
export const SYSTEM_SCOPES = [
  "sys:job:list",
  "sys:job:add",
  "sys:job:update",
  "sys:job:delete",
  "sys:job:execute",
  "sys:job:pause",
  "sys:job:resume",
  "sys:audit:list",
] as const;

/** The seed's grant of every job scope. */
export const ALL_JOB_SCOPES = "sys:job:*";

/** Scopes that may name queue patterns. */
export const QUEUE_SCOPES = ["queue:read", "queue:admin", "queue:enqueue", "queue:lease"] as const;

/** Scopes that include another: an admin of a queue may read it. */
const IMPLIED: Readonly<Partial<Record<ScopeName, ScopeName>>> = { "queue:admin": "queue:read" };

/** A scope name, without a queue pattern. */
export type ScopeName = (typeof SYSTEM_SCOPES)[number] | (typeof QUEUE_SCOPES)[number];

/** One granted scope: a name and, for queue scopes, the queues it covers. */
export interface Grant {
  readonly name: ScopeName | "*" | typeof ALL_JOB_SCOPES;
  /** A glob over queue names; "*" (or no pattern given) covers every queue. */
  readonly pattern: string;
  /** The scope as configured, for messages. */
  readonly text: string;
}

/**
 * What a request needs: scope `scope`, and for queue scopes, a grant that
 * covers `queue`. `queue: "*"` asks for every queue (an unrestricted grant);
 * `queue: undefined` accepts a grant for any queue (the handler then refuses
 * what the request names, e.g. a malformed lease token).
 */
export interface Need {
  readonly scope: ScopeName;
  readonly queue?: string;
  /** `queue` is a key a declaration names besides its own (refused as KEY_NOT_ALLOWED, not MISSING_SCOPE). */
  readonly key?: boolean;
}

const systemNames = new Set<string>(SYSTEM_SCOPES);
const queueNames = new Set<string>(QUEUE_SCOPES);

function globRegExp(glob: string): RegExp {
  const body = [...glob].map((c) => (c === "*" ? ".*" : c === "?" ? "." : c.replace(/[\\^$.|+()[\]{}]/g, "\\$&"))).join("");
  return new RegExp(`^${body}$`, "s");
}

/** Parses one scope; INVALID_ARGUMENT naming `where` and the valid names when it is not one. */
export function parseScope(text: string, where: string): Grant {
  if (text === "*") return { name: "*", pattern: "*", text };
  if (text === ALL_JOB_SCOPES) return { name: ALL_JOB_SCOPES, pattern: "*", text };
  for (const name of queueNames) {
    if (text === name) return { name: name as ScopeName, pattern: "*", text };
    if (text.startsWith(`${name}:`) && text.length > name.length + 1) {
      return { name: name as ScopeName, pattern: text.slice(name.length + 1), text };
    }
  }
  if (systemNames.has(text)) return { name: text as ScopeName, pattern: "*", text };
  throw invalid(
    `${where}: unknown scope "${text}"; use one of ${[...SYSTEM_SCOPES, ...QUEUE_SCOPES].join(", ")}, ${ALL_JOB_SCOPES} (every sys:job scope), ` +
      `a queue scope with a pattern (queue:lease:{thumbnails}, queue:enqueue:cache.*), or *`,
  );
}

/** A caller's scopes, checked against what requests need. */
export class Grants {
  private readonly matchers: { grant: Grant; matches: (queue: string) => boolean }[];
  /** Whether these include `*`, every scope. */
  readonly all: boolean;

  constructor(readonly grants: readonly Grant[]) {
    this.all = grants.some((g) => g.name === "*");
    this.matchers = grants.map((grant) => {
      const re = grant.pattern === "*" ? undefined : globRegExp(grant.pattern);
      return { grant, matches: (queue: string) => (re ? re.test(queue) : true) };
    });
  }

  /** Whether these scopes satisfy `need`. */
  allows(need: Need): boolean {
    return this.matchers.some(({ grant, matches }) => {
      if (grant.name === "*") return true;
      if (grant.name === ALL_JOB_SCOPES) return need.scope.startsWith("sys:job:");
      if (grant.name !== need.scope && IMPLIED[grant.name] !== need.scope) return false;
      if (need.queue === undefined) return true;
      if (need.queue === "*") return grant.pattern === "*";
      return matches(need.queue);
    });
  }
}

/** How a need reads in an error message: the scope to add. */
export function describeNeed(need: Need): string {
  if (!queueNames.has(need.scope) || need.queue === undefined) return need.scope;
  if (need.queue === "*") return `${need.scope} for every queue (no pattern)`;
  return `${need.scope}:${need.queue} (or a pattern that matches "${need.queue}")`;
}
