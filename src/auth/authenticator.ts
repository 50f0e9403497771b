/**
 * Authentication: turns a call's credentials (the `authorization` metadata,
 * the client certificate's common name) into a Principal, its name and scopes.
 * Tokens are looked up by their sha256, so no token is ever held in memory
 * longer than one call, written to config, or logged.
 */
import { createHash } from "node:crypto";
import { SwitchyardError } from "../errors.js";
import { Grants, parseScope } from "./scopes.js";
import type { AuthSettings } from "./settings.js";

/** Who made a call, and what they may do. */
export interface Principal {
  /** The token's name, "CN=<common name>", or "anonymous". */
  readonly name: string;
  readonly grants: Grants;
  /** True for a caller identified by a token or a mapped certificate. */
  readonly authenticated: boolean;
}

const everything = new Grants([parseScope("*", "built-in")]);

/** The caller when authentication is off and no credential names it. */
export const ANONYMOUS: Principal = { name: "anonymous", grants: everything, authenticated: false };

/** The sha256 (hex) of a token: what SWITCHYARD_AUTH_TOKENS holds. */
export function tokenHash(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

const unauthenticated = (message: string) => new SwitchyardError("unauthenticated", message, { reason: "UNAUTHENTICATED" });

/** Names callers from the configured tokens and certificate mappings. */
export class Authenticator {
  private readonly byHash = new Map<string, Principal>();
  private readonly byCn = new Map<string, Principal>();

  constructor(readonly settings: AuthSettings) {
    for (const t of settings.tokens) this.byHash.set(t.sha256, { name: t.name, grants: new Grants(t.scopes), authenticated: true });
    for (const c of settings.certificates) this.byCn.set(c.cn, { name: `CN=${c.cn}`, grants: new Grants(c.scopes), authenticated: true });
  }

  /** Whether calls need credentials. */
  get enabled(): boolean {
    return this.settings.enabled;
  }

  /**
   * The caller of a call with `authorization` metadata values and a verified
   * client certificate's common name (if any). A bearer token, when sent, must
   * be known; without one, a mapped certificate names the caller. With
   * authentication off, every caller may do everything and is named by
   * whatever credential it sent (for the audit log).
   * Throws UNAUTHENTICATED when authentication is on and nothing names the caller.
   */
  authenticate(authorization: readonly string[], certificateCn: string | undefined): Principal {
    if (!this.enabled) return this.identify(authorization, certificateCn);
    if (authorization.length > 1) throw unauthenticated("send one authorization metadata entry, not several");
    if (authorization.length === 1) {
      const m = /^Bearer +(\S+) *$/i.exec(authorization[0]);
      if (!m) throw unauthenticated('authorization metadata must be "Bearer <token>"');
      const principal = this.byHash.get(tokenHash(m[1]));
      if (!principal) throw unauthenticated("unknown bearer token");
      return principal;
    }
    const byCert = certificateCn === undefined ? undefined : this.byCn.get(certificateCn);
    if (byCert) return byCert;
    if (certificateCn !== undefined) {
      throw unauthenticated(`client certificate CN=${certificateCn} is not mapped to scopes; send a bearer token, or map it in SWITCHYARD_TLS_CLIENT_SCOPES`);
    }
    throw unauthenticated('missing credentials: send metadata "authorization: Bearer <token>"');
  }

  private identify(authorization: readonly string[], certificateCn: string | undefined): Principal {
    const m = authorization.length === 1 ? /^Bearer +(\S+) *$/i.exec(authorization[0]) : null;
    const known = m ? this.byHash.get(tokenHash(m[1])) : undefined;
    const name = known?.name ?? (certificateCn !== undefined ? `CN=${certificateCn}` : ANONYMOUS.name);
    return name === ANONYMOUS.name ? ANONYMOUS : { name, grants: everything, authenticated: false };
  }
}
