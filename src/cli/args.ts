/**
 * Argument parsing for the `switchyard` command line (node:util parseArgs),
 * the options every command takes, and the conversions commands share.
 */
import { parseArgs } from "node:util";
import { parseDuration } from "../config.js";

/** A mistake in the command line: printed with the usage, exit status 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Option specs as parseArgs takes them. */
export type OptionSpecs = Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }>;

/** Options of every command but `serve`. */
export const globalOptions = {
  address: { type: "string" },
  token: { type: "string" },
  json: { type: "boolean" },
  timeout: { type: "string" },
  tls: { type: "boolean" },
  "ca-file": { type: "string" },
  "cert-file": { type: "string" },
  "key-file": { type: "string" },
  "server-name": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies OptionSpecs;

/** How the CLI reaches a server with TLS on its port: PEM file paths, and a name to check instead of the address's host. */
export interface TlsFlags {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  serverName?: string;
}

/** Where the CLI connects, and how it prints. */
export interface Globals {
  address: string;
  token?: string;
  json: boolean;
  timeoutMs: number;
  /** Undefined for plaintext. */
  tls?: TlsFlags;
}

/** Parsed options: strings, booleans and string lists by name. */
export type Values = Record<string, string | boolean | string[] | undefined>;

/** Parses `argv` against the global options and `specs`; unknown options are a UsageError. */
export function parse(argv: string[], specs: OptionSpecs): { values: Values; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({ args: argv, options: { ...globalOptions, ...specs }, allowPositionals: true, strict: true });
    return { values: values as Values, positionals };
  } catch (err) {
    const message = err instanceof Error ? err.message.replace(/\. To specify.*$/s, "") : String(err);
    // An item id may begin with '-': parseArgs takes it for an option unless it comes after --.
    const unknown = /^Unknown option '(-[^']*)'/.exec(message);
    throw new UsageError(unknown ? `${message}; if ${unknown[1]} is an argument (an item id, say), put it after --` : message);
  }
}

/** The connection settings: flags first, then SWITCHYARD_ADDRESS / SWITCHYARD_TOKEN from `env`. */
export function globalsOf(values: Values, env: NodeJS.ProcessEnv): Globals {
  const timeout = str(values, "timeout");
  return {
    address: str(values, "address") ?? env.SWITCHYARD_ADDRESS ?? "127.0.0.1:50051",
    token: str(values, "token") ?? (env.SWITCHYARD_TOKEN || undefined),
    json: values.json === true,
    timeoutMs: timeout ? durationArg("--timeout", timeout) : 30_000,
    tls: tlsFlags(values),
  };
}

/** TLS when --tls or any TLS file or name is given; a client certificate needs its key and the other way round. */
function tlsFlags(values: Values): TlsFlags | undefined {
  const flags: TlsFlags = {
    caFile: str(values, "ca-file"),
    certFile: str(values, "cert-file"),
    keyFile: str(values, "key-file"),
    serverName: str(values, "server-name"),
  };
  if (values.tls !== true && Object.values(flags).every((v) => v === undefined)) return undefined;
  if ((flags.certFile === undefined) !== (flags.keyFile === undefined)) {
    throw new UsageError("--cert-file and --key-file go together: a client certificate and its key");
  }
  return flags;
}

/** A string option, if given. */
export function str(values: Values, name: string): string | undefined {
  const v = values[name];
  return typeof v === "string" ? v : undefined;
}

/** A repeatable string option (empty when not given). */
export function list(values: Values, name: string): string[] {
  const v = values[name];
  return Array.isArray(v) ? v : [];
}

/** "500ms", "15s", "5m", "24h" → ms; a UsageError naming the flag otherwise. */
export function durationArg(flag: string, text: string): number {
  try {
    return parseDuration(flag, text);
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
}

/** A non-negative integer option. */
export function intArg(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`${flag} must be a non-negative integer, not "${text}"`);
  return n;
}

/** One of `choices` (case-insensitive, - and _ alike) for an option. */
export function choice<T extends string>(flag: string, text: string, choices: readonly T[]): T {
  const norm = text.toLowerCase().replace(/-/g, "_");
  const found = choices.find((c) => c === norm);
  if (!found) throw new UsageError(`${flag} must be one of ${choices.map((c) => c.replace(/_/g, "-")).join(", ")}, not "${text}"`);
  return found;
}

/** "key=value" headers → a record; a UsageError for one without "=". */
export function headersArg(pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`--header takes key=value, not "${pair}"`);
    out[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return out;
}

/** Exactly `n` positional arguments named `names`, or a UsageError. */
export function need(positionals: string[], names: string[]): string[] {
  if (positionals.length < names.length) throw new UsageError(`missing ${names.slice(positionals.length).join(" ")}`);
  if (positionals.length > names.length) throw new UsageError(`unexpected argument "${positionals[names.length]}"`);
  return positionals;
}
