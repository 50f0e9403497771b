/**
 * Security settings: who may call (bearer tokens by hash, client certificates
 * by common name) and how the port is secured (plaintext, TLS, mutual TLS).
 * `config.ts` reads the environment and hands the raw values here.
 */
import { readFileSync } from "node:fs";
import { invalid } from "../errors.js";
import { parseScope, type Grant } from "./scopes.js";

/** A caller known by the sha256 of its bearer token. */
export interface TokenEntry {
  readonly name: string;
  /** sha256 of the token, 64 lowercase hex digits. The token itself is never configured. */
  readonly sha256: string;
  readonly scopes: readonly Grant[];
}

/** A caller known by the common name of its (CA-verified) client certificate. */
export interface CertificateEntry {
  readonly cn: string;
  readonly scopes: readonly Grant[];
}

/** Authentication and authorization. */
export interface AuthSettings {
  /** Whether calls need credentials and scopes. */
  readonly enabled: boolean;
  /** True when neither SWITCHYARD_AUTH nor any credentials were configured: open, with a warning at start. */
  readonly implicitlyOff: boolean;
  readonly tokens: readonly TokenEntry[];
  readonly certificates: readonly CertificateEntry[];
}

/** TLS on the gRPC port; absent for plaintext (e.g. behind a mesh sidecar that terminates TLS). */
export interface TlsSettings {
  readonly certFile: string;
  readonly keyFile: string;
  /** CA bundle that client certificates must chain to ("" without client auth). */
  readonly caFile: string;
  /** "require": a client without a certificate from `caFile` cannot connect. */
  readonly clientAuth: "none" | "require";
}

/** The environment variables this module interprets, as raw text. */
export interface SecurityVars {
  auth?: string;
  tokens?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsCa?: string;
  tlsClientAuth?: string;
  tlsClientScopes?: string;
}

/** Inline JSON (starting with `[`, or `{` to be told it must be an array) or the path of a JSON file. */
function jsonSource(variable: string, text: string): unknown {
  const inline = /^\s*[[{]/.test(text);
  let source = text;
  if (!inline) {
    try {
      source = readFileSync(text, "utf8");
    } catch (err) {
      throw invalid(`${variable}: cannot read file "${text}" (${err instanceof Error ? err.message : String(err)}); give a JSON array or a file that holds one`);
    }
  }
  try {
    return JSON.parse(source);
  } catch (err) {
    throw invalid(`${variable}${inline ? "" : ` (file ${text})`}: not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function entries(variable: string, text: string): Record<string, unknown>[] {
  const parsed = jsonSource(variable, text);
  if (!Array.isArray(parsed)) throw invalid(`${variable}: expected a JSON array of entries`);
  return parsed.map((e, i) => {
    if (typeof e !== "object" || e === null || Array.isArray(e)) throw invalid(`${variable}[${i}]: expected an object`);
    return e as Record<string, unknown>;
  });
}

function scopesOf(where: string, value: unknown): Grant[] {
  if (!Array.isArray(value) || value.some((s) => typeof s !== "string")) throw invalid(`${where}.scopes: expected an array of scope strings`);
  return (value as string[]).map((s) => parseScope(s, `${where}.scopes`));
}

function nonEmpty(where: string, value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") throw invalid(`${where}: expected a non-empty string`);
  return value;
}

/** Parses SWITCHYARD_AUTH_TOKENS: `[{"name", "sha256", "scopes": [...]}]`. */
export function parseTokens(text: string, variable = "SWITCHYARD_AUTH_TOKENS"): TokenEntry[] {
  const names = new Set<string>();
  const hashes = new Set<string>();
  return entries(variable, text).map((e, i) => {
    const where = `${variable}[${i}]`;
    const name = nonEmpty(`${where}.name`, e.name);
    if (e.token !== undefined) throw invalid(`${where}: never configure a token in plain text; give its "sha256" (hex) instead`);
    const sha256 = nonEmpty(`${where}.sha256`, e.sha256).toLowerCase();
    if (!/^[0-9a-f]{64}$/.test(sha256)) throw invalid(`${where}.sha256: expected 64 hex digits (printf %s "$TOKEN" | sha256sum)`);
    if (names.has(name)) throw invalid(`${where}: the name "${name}" appears twice`);
    if (hashes.has(sha256)) throw invalid(`${where}: the same sha256 appears twice (two names for one token)`);
    names.add(name);
    hashes.add(sha256);
    return { name, sha256, scopes: scopesOf(where, e.scopes) };
  });
}

/** Parses SWITCHYARD_TLS_CLIENT_SCOPES: `[{"cn", "scopes": [...]}]`. */
export function parseCertificates(text: string, variable = "SWITCHYARD_TLS_CLIENT_SCOPES"): CertificateEntry[] {
  const seen = new Set<string>();
  return entries(variable, text).map((e, i) => {
    const where = `${variable}[${i}]`;
    const cn = nonEmpty(`${where}.cn`, e.cn);
    if (seen.has(cn)) throw invalid(`${where}: cn "${cn}" appears twice`);
    seen.add(cn);
    return { cn, scopes: scopesOf(where, e.scopes) };
  });
}

function tlsSettings(v: SecurityVars): TlsSettings | undefined {
  const clientAuth = v.tlsClientAuth || "none";
  if (clientAuth !== "none" && clientAuth !== "require") {
    throw invalid(`SWITCHYARD_TLS_CLIENT_AUTH="${clientAuth}" must be none or require`);
  }
  if (!v.tlsCert && !v.tlsKey) {
    if (v.tlsCa || clientAuth !== "none") throw invalid("TLS client settings need SWITCHYARD_TLS_CERT and SWITCHYARD_TLS_KEY (the server's certificate and key)");
    return undefined;
  }
  if (!v.tlsCert || !v.tlsKey) throw invalid("set both SWITCHYARD_TLS_CERT and SWITCHYARD_TLS_KEY, or neither (plaintext)");
  if (clientAuth === "require" && !v.tlsCa) throw invalid("SWITCHYARD_TLS_CLIENT_AUTH=require needs SWITCHYARD_TLS_CA, the CA that signs client certificates");
  return { certFile: v.tlsCert, keyFile: v.tlsKey, caFile: v.tlsCa ?? "", clientAuth };
}

/** Validates the security variables together (README, "Security"). */
export function securitySettings(v: SecurityVars): { auth: AuthSettings; tls: TlsSettings | undefined } {
  const tls = tlsSettings(v);
  const tokens = v.tokens ? parseTokens(v.tokens) : [];
  const certificates = v.tlsClientScopes ? parseCertificates(v.tlsClientScopes) : [];
  if (certificates.length > 0 && tls?.clientAuth !== "require") {
    throw invalid("SWITCHYARD_TLS_CLIENT_SCOPES maps client certificates, which only SWITCHYARD_TLS_CLIENT_AUTH=require verifies");
  }
  const mode = v.auth ?? "";
  if (mode !== "" && mode !== "on" && mode !== "off") throw invalid(`SWITCHYARD_AUTH="${mode}" must be on or off`);
  const credentials = tokens.length + certificates.length > 0;
  if (mode === "on" && !credentials) {
    throw invalid("SWITCHYARD_AUTH=on but no caller is configured: set SWITCHYARD_AUTH_TOKENS or SWITCHYARD_TLS_CLIENT_SCOPES");
  }
  const enabled = mode === "on" || (mode === "" && credentials);
  return { auth: { enabled, implicitlyOff: mode === "" && !credentials, tokens, certificates }, tls };
}
