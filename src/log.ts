/**
 * Structured logs: one JSON object per line on stderr, written by pino.
 *
 * Lines look like `{"level":"info","time":"2026-…Z","msg":"…",…fields}`. Calls
 * log with a `requestId` (see grpc/observe.ts); secrets and payloads are never
 * passed in fields, and `redact` blanks them anyway should one slip in.
 */
import { pino, type DestinationStream, type Logger as Pino } from "pino";

/** Log levels in increasing severity. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

/** A structured logger. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  /** A logger that adds `fields` to every line (see {@link withFields}). */
  child?(fields: Record<string, unknown>): Logger;
}

/** Field names whose values never reach a log line, at the top level or one object down. */
const REDACTED = ["authorization", "password", "payload", "replies"];

/**
 * An error as pino serializes it, but a Redis command's arguments left out: ioredis puts the failed
 * command on its errors (`command: { name, args }`), and the args are items' payloads (a push), or a
 * script's whole text (an EVAL after NOSCRIPT). Its causes are serialized the same way.
 */
function serializeError(err: Error): Record<string, unknown> {
  return withoutCommandArgs(pino.stdSerializers.err(err)) as Record<string, unknown>;
}

/** `value` with every `command.args` (objects down to a few levels) replaced by their count; copies, never changes, what it is given. */
function withoutCommandArgs(value: unknown, depth = 0): unknown {
  if (typeof value !== "object" || value === null || Array.isArray(value) || depth > 4) return value;
  const copy: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const args = k === "command" && typeof v === "object" && v !== null ? (v as { args?: unknown }).args : undefined;
    copy[k] = Array.isArray(args) ? { ...v, args: `${args.length} not logged` } : withoutCommandArgs(v, depth + 1);
  }
  return copy;
}

/** Errors at the top level of the fields keep their type, message and stack (`err` included: see serializers). */
function errorsToObjects(fields: Record<string, unknown>): Record<string, unknown> {
  for (const [k, v] of Object.entries(fields)) if (v instanceof Error && k !== "err") fields[k] = serializeError(v);
  return fields;
}

function wrap(p: Pino): Logger {
  return {
    debug: (msg, fields) => p.debug(fields ?? {}, msg),
    info: (msg, fields) => p.info(fields ?? {}, msg),
    warn: (msg, fields) => p.warn(fields ?? {}, msg),
    error: (msg, fields) => p.error(fields ?? {}, msg),
    child: (fields) => wrap(p.child(fields)),
  };
}

/**
 * A logger writing JSON lines at `level` and above to stderr, or to `write`
 * (one call per line, with its newline) when given one: tests capture lines so.
 */
export function createLogger(level: LogLevel, write?: (line: string) => void): Logger {
  const destination: DestinationStream = write ? { write } : pino.destination({ dest: 2, sync: true });
  const p = pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }), log: errorsToObjects },
      serializers: { err: serializeError },
      redact: { paths: [...REDACTED, ...REDACTED.map((k) => `*.${k}`)], censor: "[redacted]" },
    },
    destination,
  );
  return wrap(p);
}

/** `log` with `fields` on every line: its own child logger, or a wrapper for loggers without one. */
export function withFields(log: Logger, fields: Record<string, unknown>): Logger {
  if (log.child) return log.child(fields);
  const merge = (f?: Record<string, unknown>) => ({ ...fields, ...f });
  return {
    debug: (m, f) => log.debug(m, merge(f)),
    info: (m, f) => log.info(m, merge(f)),
    warn: (m, f) => log.warn(m, merge(f)),
    error: (m, f) => log.error(m, merge(f)),
  };
}
