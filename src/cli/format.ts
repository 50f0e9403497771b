/** How the `switchyard` command line prints: aligned tables for people, JSON with --json. */
import { toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampMs, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";

/** Where a command writes. */
export interface Output {
  out(text: string): void;
  err(text: string): void;
}

/** Columns separated by two spaces, each as wide as its widest cell; the last is not padded. */
export function table(headers: string[], rows: string[][]): string {
  const all = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]) =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i])))
      .join("  ")
      .trimEnd();
  return all.map(line).join("\n") + "\n";
}

/** "key: value" lines, keys aligned. */
export function fields(pairs: [string, string][]): string {
  const width = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(width)} ${v}`.trimEnd()).join("\n") + "\n";
}

/** JSON for --json: two-space indented, one document. */
export function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + "\n";
}

/** A message in protobuf JSON, zero values included so scripts always find every field. */
export function pj<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): JsonValue {
  return toJson(schema, message, { alwaysEmitImplicit: true });
}

/** An ISO time, or "-" when unset. */
export function time(ts: Timestamp | undefined): string {
  return ts ? new Date(timestampMs(ts)).toISOString() : "-";
}

/** A duration as "1.5s" / "250ms", or "-" when unset. */
export function duration(d: Duration | undefined): string {
  if (!d) return "-";
  const ms = Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
  return ms < 1000 ? `${ms}ms` : `${ms / 1000}s`;
}

/** An enum value's name without its type prefix: JOB_STATUS_RUNNING → running. */
export function enumName(names: Record<number, string>, value: number, prefix: string): string {
  const name = names[value] ?? String(value);
  return name.replace(prefix, "").toLowerCase();
}

const printable = /^[\x20-\x7e\t]*$/;

/** A payload for a table: its UTF-8 text when printable, else base64; cut to `max` characters. */
export function payloadText(bytes: Uint8Array, max = 60): string {
  const buf = Buffer.from(bytes);
  const text = buf.toString("utf8");
  const shown = printable.test(text) ? text : `base64:${buf.toString("base64")}`;
  return shown.length > max ? `${shown.slice(0, max - 1)}…` : shown;
}

/** Headers as "k=v,k=v" for a table. */
export function headersText(headers: Record<string, string>): string {
  const pairs = Object.entries(headers).map(([k, v]) => `${k}=${v}`);
  return pairs.length ? pairs.join(",") : "-";
}
