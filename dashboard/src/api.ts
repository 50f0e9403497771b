/**
 * The dashboard's way to the server: generated clients for the same protobuf
 * services every other client uses, over the Connect protocol served on this
 * origin under /api, with the signed-in bearer token.
 */
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { QueueService } from "../../src/gen/switchyard/v1/queue_pb.js";
import { CronService } from "../../src/gen/switchyard/v1/cron_pb.js";
import { AuthService } from "../../src/gen/switchyard/v1/auth_pb.js";
import { Grants, parseScope, describeNeed, type Need } from "../../src/auth/scopes.js";

const TOKEN_KEY = "switchyard.token";

/** The bearer token of this tab (sessionStorage: gone when the tab closes). */
export const session = {
  get token(): string {
    return sessionStorage.getItem(TOKEN_KEY) ?? "";
  },
  set token(value: string) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
};

const bearer: Interceptor = (next) => (req) => {
  const token = session.token;
  if (token) req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

const transport = createConnectTransport({
  baseUrl: new URL("/api", location.origin).href,
  useBinaryFormat: true,
  interceptors: [bearer],
  defaultTimeoutMs: 15_000,
});

export const queueApi = createClient(QueueService, transport);
export const cronApi = createClient(CronService, transport);
export const authApi = createClient(AuthService, transport);

/** Every item of a paged listing (ListQueues, ListJobs), following next_page_token. */
export async function allPages<T>(page: (pageToken: string) => Promise<{ items: T[]; nextPageToken: string }>): Promise<T[]> {
  const all: T[] = [];
  let pageToken = "";
  do {
    const res = await page(pageToken);
    all.push(...res.items);
    pageToken = res.nextPageToken;
  } while (pageToken);
  return all;
}

/** What the signed-in caller may do, from AuthService.GetCaller. */
export class Access {
  private readonly grants: Grants;

  constructor(
    readonly name: string,
    readonly scopes: readonly string[],
    readonly authEnabled: boolean,
  ) {
    this.grants = new Grants(scopes.flatMap((s) => {
      try {
        return [parseScope(s, "caller")];
      } catch {
        return [];
      }
    }));
  }

  /** Whether a call needing `need` would be allowed. */
  can(need: Need): boolean {
    return this.grants.allows(need);
  }

  /** Why a button is disabled: the scope it needs. */
  why(need: Need): string {
    return `needs scope ${describeNeed(need)}`;
  }

  /** True when the caller may change nothing the dashboard shows. */
  get readOnly(): boolean {
    const writes: Need[] = [
      { scope: "queue:admin" },
      { scope: "sys:job:add" },
      { scope: "sys:job:update" },
      { scope: "sys:job:pause" },
      { scope: "sys:job:resume" },
      { scope: "sys:job:execute" },
    ];
    return !writes.some((n) => this.can(n));
  }
}

/** The caller, or undefined when the server wants a (valid) token. */
export async function whoAmI(): Promise<Access | undefined> {
  try {
    const c = await authApi.getCaller({});
    return new Access(c.name, c.scopes, c.authEnabled);
  } catch (err) {
    if (ConnectError.from(err).code === Code.Unauthenticated) return undefined;
    throw err;
  }
}

/** A call's error as one line for the page: the server's message says what to fix. */
export function errorText(err: unknown): string {
  const e = ConnectError.from(err);
  return `${Code[e.code] ?? "error"}: ${e.rawMessage}`;
}

/** True for an error that means the token is missing, unknown or expired. */
export function isUnauthenticated(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Unauthenticated;
}
