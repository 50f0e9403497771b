/** Log levels in increasing severity. */
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };

/** A structured logger: one JSON object per line on stderr. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

function describe(value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

/** A logger writing JSON lines at `level` and above. */
export function createLogger(level: LogLevel, write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const emit = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (rank[lvl] < rank[level]) return;
    const entry: Record<string, unknown> = { time: new Date().toISOString(), level: lvl, msg };
    if (fields) for (const [k, v] of Object.entries(fields)) entry[k] = describe(v);
    write(JSON.stringify(entry) + "\n");
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
  };
}
