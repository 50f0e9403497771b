/**
 * Where the instance listens (SWITCHYARD_GRPC_ADDRESS, SWITCHYARD_HTTP_ADDRESS): the form of an
 * address, checked when the configuration is read, and what can still go wrong when it is bound
 * (a host that does not resolve, a port in use, a socket a killed instance left), said in one
 * line that names the variable instead of a resolver's or a socket's stack trace.
 */
import { existsSync, lstatSync, unlinkSync } from "node:fs";
import { connect } from "node:net";
import { dirname } from "node:path";
import { invalid, type SwitchyardError } from "./errors.js";

/** The longest unix socket path Linux binds whole (sun_path is 108 bytes with its NUL); a longer one is cut short. */
const MAX_SOCKET_PATH_BYTES = 107;

/** A value as an error line shows it: a long one cut short. */
function shown(text: string): string {
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

function refused(variable: string, text: string, why: string): SwitchyardError {
  return invalid(`${variable}="${shown(text)}" ${why}`);
}

/** A host name or an IPv4 address: ASCII letters, digits, '-', '_' and '.', an IPv4 address written whole. */
function hostOk(host: string): boolean {
  if (host.length > 253 || !/^[A-Za-z0-9_.-]+$/.test(host)) return false;
  // Labels that are all numbers are an IPv4 address, which the resolver would also take
  // abbreviated or in hex (1.2.3 as 1.2.0.3, 0x10 as 0.0.0.16): only four decimal parts are.
  if (/^(0x[0-9a-f]*|\d+)(\.(0x[0-9a-f]*|\d+))*\.?$/i.test(host)) {
    const parts = host.split(".");
    return parts.length === 4 && parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255);
  }
  return true;
}

/** The path of a unix: address (grpc-js's forms unix:relative, unix:/absolute, unix:///absolute), or undefined. */
export function socketPath(address: string): string | undefined {
  if (!address.startsWith("unix:")) return undefined;
  const rest = address.slice("unix:".length);
  return rest.startsWith("///") ? rest.slice(2) : rest;
}

/**
 * A listening address of `variable`: host:port (an IPv6 host in brackets, with a zone if need
 * be; port 0 picks one) or, where `unix` is allowed, unix:PATH.
 */
export function listenAddress(variable: string, text: string, unix = false): string {
  const forms = unix
    ? "must be host:port (port 0 picks one; an IPv6 host as [::1]:50051) or unix:/path/to/socket"
    : "must be host:port (port 0 picks one; an IPv6 host as [::1]:9090) or off";
  const path = unix ? socketPath(text) : undefined;
  if (path !== undefined) {
    if (path === "" || path === "/" || path.startsWith("//") || /\s/.test(path)) throw refused(variable, text, forms);
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
      throw refused(variable, text, `names a socket path of ${Buffer.byteLength(path)} bytes; a unix socket path may have at most ${MAX_SOCKET_PATH_BYTES}`);
    }
    return text;
  }
  const m = /^(?:\[([0-9a-fA-F:.]*:[0-9a-fA-F:.]*)(%[A-Za-z0-9_.-]+)?\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  if (!m || Number(m[4]) > 65_535 || (m[3] !== undefined && !hostOk(m[3]))) throw refused(variable, text, forms);
  return text;
}

/**
 * Readies a unix socket path for a bind: a socket there that no one answers on (an instance
 * killed before it could remove it) is removed; anything else there, a missing directory, or a
 * listening instance is refused, naming `variable`.
 */
export async function freeSocketPath(variable: string, address: string): Promise<{ removedStale: boolean }> {
  const path = socketPath(address);
  if (path === undefined) return { removedStale: false };
  const dir = dirname(path);
  if (!existsSync(dir)) throw refused(variable, address, `names a socket in ${dir}, which does not exist`);
  let isSocket: boolean;
  try {
    isSocket = lstatSync(path).isSocket();
  } catch {
    return { removedStale: false }; // nothing there
  }
  if (!isSocket) throw refused(variable, address, `names ${path}, which exists and is not a socket`);
  // A connection says someone listens; a refusal says no one does; anything else (EACCES) is left to the bind.
  const answer = await new Promise<"listening" | "stale" | "unknown">((resolve) => {
    const probe = connect({ path });
    probe.once("connect", () => {
      probe.destroy();
      resolve("listening");
    });
    probe.once("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED" || err.code === "ENOENT" ? "stale" : "unknown"));
  });
  if (answer === "listening") throw refused(variable, address, `names ${path}, where another process listens already`);
  if (answer === "unknown") return { removedStale: false };
  try {
    unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw listenFailed(variable, address, err);
  }
  return { removedStale: true };
}

/** A bind's failure as one line naming `variable`, with the resolver's or the socket's own reason. */
export function listenFailed(variable: string, address: string, err: unknown): SwitchyardError {
  const message = err instanceof Error ? err.message : String(err);
  // grpc-js: "No address added out of total 1 resolved errors: [listen EADDRINUSE: …]"
  const reason = /errors: \[(.*)\]$/s.exec(message)?.[1] ?? message;
  return refused(variable, address, `could not be listened on: ${reason}`);
}
