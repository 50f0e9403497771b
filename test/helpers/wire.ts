/**
 * Helpers for the tests that hold hand-written wire forms to protobuf-es
 * (enqueue-wire, lease-wire): seeded generators of values and of loose
 * encodings (unknown fields of every wire type, wrong wire types, invalid
 * UTF-8), a mangler, and the comparison of both decoders' outcomes.
 */
import { expect } from "vitest";
import { fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { below, bytes, text } from "./random.js";

export type Next = () => number;
export type Outcome = { ok: unknown } | { error: string };

export function outcome(decode: () => unknown): Outcome {
  try {
    return { ok: decode() };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

/**
 * Decodes `input` both ways and expects the same outcome: equal messages that
 * also encode to equal bytes (so headers keep their order), or the same error.
 * Returns whether it decoded.
 */
export function expectSameAsProtobufEs(schema: DescMessage, decode: (b: Uint8Array) => unknown, input: Uint8Array): boolean {
  const theirs = outcome(() => fromBinary(schema, input, { readUnknownFields: false }));
  const mine = outcome(() => decode(input));
  expect(mine).toEqual(theirs);
  if ("ok" in mine && "ok" in theirs) {
    expect(Buffer.from(toBinary(schema, mine.ok as never)).equals(Buffer.from(toBinary(schema, theirs.ok as never)))).toBe(true);
    return true;
  }
  return false;
}


export const headerKeys = ["traceparent", "", "__proto__", "constructor", "toString", "1", "10", "-1", "01", "schlüssel"];

export function headers(next: Next): Record<string, string> {
  const out: Record<string, string> = {};
  for (let n = below(next, 5); n > 0; n--) {
    const key = next() < 0.5 ? headerKeys[below(next, headerKeys.length)] : text(next, 8);
    if (key === "__proto__") Object.defineProperty(out, key, { value: text(next, 20), writable: true, enumerable: true, configurable: true });
    else out[key] = text(next, 20);
  }
  return out;
}

/** An int64 anywhere in its range, often a small one. */
export function int64(next: Next): bigint {
  if (next() < 0.5) return BigInt(below(next, 1000) - 500);
  return BigInt.asIntN(64, (BigInt(below(next, 2 ** 32)) << 32n) | BigInt(below(next, 2 ** 32)));
}

export function int32(next: Next): number {
  return next() < 0.5 ? below(next, 2000) - 1000 : below(next, 2 ** 32) | 0;
}


/** A field no message here declares, of any wire type; groups nest. */
export function unknownField(w: BinaryWriter, next: Next, firstFree: number, depth = 0): void {
  const no = [firstFree, firstFree + 1, 15, 16, 2047, 2048, 536_870_911][below(next, 7)];
  const wireType = [WireType.Varint, WireType.Bit64, WireType.LengthDelimited, WireType.StartGroup, WireType.Bit32][below(next, 5)];
  w.tag(no, wireType);
  switch (wireType) {
    case WireType.Varint:
      w.uint64(BigInt.asUintN(64, int64(next)));
      break;
    case WireType.Bit64:
      w.fixed64(BigInt.asUintN(64, int64(next)));
      break;
    case WireType.Bit32:
      w.fixed32(below(next, 2 ** 32));
      break;
    case WireType.LengthDelimited:
      w.bytes(bytes(next, 10));
      break;
    case WireType.StartGroup:
      for (let n = depth < 3 ? below(next, 3) : 0; n > 0; n--) unknownField(w, next, 1, depth + 1);
      w.tag(no, WireType.EndGroup);
  }
}

/** A string field, now and then with invalid UTF-8 or a byte-order mark. */
export function looseString(w: BinaryWriter, no: number, next: Next): void {
  const r = next();
  if (r < 0.02) w.tag(no, WireType.LengthDelimited).bytes(Uint8Array.from([0x61, [0xff, 0xc3, 0x80, 0xed][below(next, 4)]]));
  else if (r < 0.04) w.tag(no, WireType.LengthDelimited).bytes(Uint8Array.from([0xef, 0xbb, 0xbf, 0x61]));
  else w.tag(no, WireType.LengthDelimited).string(text(next, 12));
}


/** A known field with a wire type its declaration does not have, and whatever bytes follow. */
export function wrongWireType(w: BinaryWriter, next: Next, fields: number): void {
  w.tag(1 + below(next, fields), [WireType.Varint, WireType.Bit64, WireType.StartGroup, WireType.EndGroup, WireType.Bit32][below(next, 5)]);
  w.raw(bytes(next, 4));
}

export function looseDuration(w: BinaryWriter, next: Next): void {
  for (let n = below(next, 4); n > 0; n--) {
    const r = next();
    if (r < 0.4) w.tag(1, WireType.Varint).int64(int64(next));
    else if (r < 0.8) w.tag(2, WireType.Varint).int32(int32(next));
    else unknownField(w, next, 3);
  }
}

export function looseHeader(w: BinaryWriter, next: Next): void {
  for (let n = below(next, 4); n > 0; n--) {
    const r = next();
    if (r < 0.4) {
      if (next() < 0.3) w.tag(1, WireType.LengthDelimited).string(headerKeys[below(next, headerKeys.length)]);
      else looseString(w, 1, next);
    } else if (r < 0.8) looseString(w, 2, next);
    else unknownField(w, next, 3);
  }
}


/** `input` with one change: cut short, a byte changed, inserted or removed. */
export function mangle(input: Uint8Array, next: Next): Uint8Array {
  const at = below(next, input.length + 1);
  const bytes = Array.from(input);
  switch (below(next, 4)) {
    case 0:
      return input.subarray(0, at);
    case 1:
      if (at < bytes.length) bytes[at] = next() < 0.5 ? bytes[at] ^ (1 << below(next, 8)) : below(next, 256);
      break;
    case 2:
      bytes.splice(at, 0, below(next, 256));
      break;
    default:
      bytes.splice(at, 1);
  }
  return Uint8Array.from(bytes);
}
