/**
 * The reading side of the wire pieces Switchyard handles by hand (see
 * proto-writer.ts): protobuf-es' own BinaryReader, used the way fromBinary
 * uses it, with shortcuts for the fields hot paths read most, and readers of
 * the small messages (Duration, Timestamp, a string map entry) that several
 * hand-read messages hold. What they accept, return and throw is fromBinary's.
 */
import { BinaryReader, getTextEncoding } from "@bufbuild/protobuf/wire";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";

/**
 * fromBinary's recursion limit: a message read at depth d may skip unknown
 * groups nested up to this less d deep (the request is at depth 1, an item
 * or a duration at 2).
 */
export const RECURSION_LIMIT = 100;

/**
 * protobuf-es' reader with two shortcuts for what hot messages hold most (items, ids, tokens), which
 * spare the allocations of tag() (an array) and of string() (an array of
 * char codes) and read the same.
 */
export class Reader extends BinaryReader {
  /**
   * Consumes the next tag when it takes one byte (fields 1–15) and returns it
   * as (field << 3) | wire type; -1, consuming nothing, when it is longer
   * (then tag() reads it). Spares tag()'s array where a switch on the byte serves.
   */
  shortTag(): number {
    const b = this.input[this.pos];
    if (b === undefined || b >= 0x80) return -1;
    this.pos++;
    return b;
  }

  /** The whole input as Latin-1 text (one char per byte), made at the first strictString(). */
  private text?: string;

  constructor(private readonly input: Uint8Array) {
    super(input);
  }

  /** Consumes the next tag when it is the single byte `tag` (a field 1–15); tag() would read the same. */
  skipTag(tag: number): boolean {
    if (this.input[this.pos] !== tag) return false;
    this.pos++;
    return true;
  }

  /**
   * string(true): the same string, or the same error. An ASCII string is cut
   * from the input decoded once as Latin-1, which for a message of many short
   * strings (a thousand ids) costs less than decoding each on its own.
   */
  strictString(): string {
    const length = this.uint32();
    const start = this.pos;
    this.pos += length;
    if (this.pos > this.len) throw new RangeError("premature EOF"); // as string() checks
    for (let i = start; i < this.pos; i++) {
      if (this.input[i] > 0x7f) return getTextEncoding().decodeUtf8(this.input.subarray(start, this.pos), true);
    }
    this.text ??= Buffer.from(this.input.buffer, this.input.byteOffset, this.input.byteLength).toString("latin1");
    return this.text.substring(start, this.pos);
  }

  /** bytes(), but where the bytes start (they end at pos) rather than a view of them. */
  bytesStart(): number {
    const length = this.uint32();
    const start = this.pos;
    this.pos += length;
    if (this.pos > this.len) throw new RangeError("premature EOF"); // as bytes() checks
    return start;
  }

  /** The end of the message whose length comes next. */
  messageEnd(): number {
    const length = this.uint32();
    return this.pos + length;
  }
}

/**
 * A varint of at most 7 bytes (under 2^49, exact as a number) at `at.pos`, which it moves past;
 * -1 when longer or cut short. For one-pass readers of the messages Switchyard itself writes
 * (lease-wire.ts, enqueue-wire.ts), which leave anything else to the general reader.
 */
export function shortVarint(b: Uint8Array, at: { pos: number }): number {
  const first = b[at.pos];
  if (first < 0x80) {
    at.pos++;
    return first;
  }
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 7; i++) {
    const byte = b[at.pos++];
    if (byte === undefined) return -1;
    value += (byte & 0x7f) * scale;
    if (byte < 0x80) return value;
    scale *= 128;
  }
  return -1;
}

/** `b` as a Buffer, itself or a view of the same bytes. */
const asBuffer = (b: Uint8Array): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/** All of `b` as Latin-1 text (one char per byte): ASCII strings of a message are cut from it. */
export const latin1 = (b: Uint8Array): string => asBuffer(b).toString("latin1");

/** b[from, to) as text when every byte of it is ASCII (where Latin-1 reads as UTF-8 does); undefined otherwise. */
export function asciiText(b: Uint8Array, from: number, to: number): string | undefined {
  for (let i = from; i < to; i++) if (b[i] > 0x7f) return undefined;
  return asBuffer(b).toString("latin1", from, to);
}

/** The ASCII string whose length is at `at.pos` and which ends by `to`, moving past it; undefined otherwise. */
export function asciiField(b: Uint8Array, at: { pos: number }, to: number): string | undefined {
  const length = shortVarint(b, at);
  if (length < 0 || at.pos + length > to) return undefined;
  const text = asciiText(b, at.pos, at.pos + length);
  at.pos += length;
  return text;
}

/**
 * One map<string, string> entry at b[from, to) as Switchyard writes them (its key, then its
 * value, ASCII, each once; either may be missing), set into `headers` as readHeader sets it;
 * false, with nothing set, for anything else (for a one-pass reader to leave to the general one).
 */
export function readAsciiEntry(b: Uint8Array, from: number, to: number, headers: Record<string, string>): boolean {
  const at = { pos: from };
  let key: string | undefined = "";
  let value: string | undefined = "";
  if (at.pos < to && b[at.pos] === ENTRY_KEY_TAG) {
    at.pos++;
    key = asciiField(b, at, to);
  }
  if (key !== undefined && at.pos < to && b[at.pos] === ENTRY_VALUE_TAG) {
    at.pos++;
    value = asciiField(b, at, to);
  }
  if (key === undefined || value === undefined || at.pos !== to) return false;
  setHeader(headers, key, value);
  return true;
}

/** A map entry's key (field 1) and value (field 2) tags, both LEN. */
const ENTRY_KEY_TAG = (1 << 3) | 2;
const ENTRY_VALUE_TAG = (2 << 3) | 2;

/**
 * Reads a Duration or Timestamp (the same two fields: 1 seconds, 2 nanos)
 * into `into` (a repeated message field merges) or a new one of `typeName`.
 * `depth`: how deep the message holding it is (1: the message itself).
 */
function readSecondsNanos<T extends Duration | Timestamp>(r: Reader, into: T | undefined, depth: number, typeName: T["$typeName"]): T {
  const m = into ?? ({ $typeName: typeName, seconds: 0n, nanos: 0 } as T);
  const end = r.messageEnd();
  while (r.pos < end) {
    const [no, wireType] = r.tag();
    if (no === 1) m.seconds = r.int64() as bigint;
    else if (no === 2) m.nanos = r.int32();
    else r.skip(wireType, no, RECURSION_LIMIT - depth - 1);
  }
  return m;
}

/** Reads a Duration (see readSecondsNanos). */
export const readDuration = (r: Reader, into: Duration | undefined, depth: number): Duration => readSecondsNanos(r, into, depth, "google.protobuf.Duration");

/** Reads a Timestamp (see readSecondsNanos). */
export const readTimestamp = (r: Reader, into: Timestamp | undefined, depth: number): Timestamp => readSecondsNanos(r, into, depth, "google.protobuf.Timestamp");

/** Reads one map entry into `headers`: a missing key or value is "", a repeated key's last value wins. */
export function readHeader(r: Reader, headers: Record<string, string>, depth: number): void {
  let key = "";
  let value = "";
  const end = r.messageEnd();
  while (r.pos < end) {
    const [no, wireType] = r.tag();
    if (no === 1) key = r.string(true);
    else if (no === 2) value = r.string(true);
    else r.skip(wireType, no, RECURSION_LIMIT - depth - 1);
  }
  setHeader(headers, key, value);
}

/** Sets header `key`: "__proto__" is a header like any other, not the object's prototype. */
export function setHeader(headers: Record<string, string>, key: string, value: string): void {
  if (key === "__proto__") Object.defineProperty(headers, key, { value, writable: true, enumerable: true, configurable: true });
  else headers[key] = value;
}
