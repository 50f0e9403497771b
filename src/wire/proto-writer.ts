/**
 * The few protobuf wire-format pieces Switchyard writes by hand on its hot
 * paths (stored envelopes, Lease deliveries, Enqueue's messages), where
 * protobuf-es' generic writer cost several µs per item. Callers measure first, allocate once, then
 * write; tests compare the bytes with protobuf-es' own.
 */

const VARINT = 0;
const LEN = 2;

/** Bytes of `n` (a non-negative safe integer) as a varint. */
export function varintSize(n: number): number {
  // Lengths fit 31 bits: shifts, rather than float division, for them.
  if (n <= 0x7fffffff) return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** A length-delimited field's size (fields 1–15): tag, length, body. */
export const lenFieldSize = (bodySize: number) => 1 + varintSize(bodySize) + bodySize;

/** A varint field's size (fields 1–15): tag and value. */
export const varintFieldSize = (n: number) => 1 + varintSize(n);

const NO_KEYS: readonly string[] = [];

/**
 * The keys of a map field's record in the order protobuf-es writes its
 * entries (Object.keys), without allocating for an empty record.
 */
export function mapKeys(record: Record<string, unknown>): readonly string[] {
  // for-in sees every key Object.keys does (and inherited ones): if it sees none, there are none.
  for (const _ in record) return Object.keys(record);
  return NO_KEYS;
}

/**
 * Measures a map<string, string> field's entries (each with key 1 and value 2,
 * both always written): pushes each entry's key, value and entry bytes onto
 * `sizes` for ProtoWriter.stringMap, and returns the bytes the entries take.
 */
export function measureStringMap(map: Readonly<Record<string, string>>, sizes: number[]): number {
  let size = 0;
  for (const key of mapKeys(map)) {
    const keySize = Buffer.byteLength(key);
    const valueSize = Buffer.byteLength(map[key]);
    const entry = lenFieldSize(keySize) + lenFieldSize(valueSize);
    sizes.push(keySize, valueSize, entry);
    size += lenFieldSize(entry);
  }
  return size;
}

/** Writes fields 1–15 into a buffer measured beforehand. */
export class ProtoWriter {
  pos = 0;
  constructor(readonly buf: Buffer) {}

  varint(n: number): void {
    const buf = this.buf;
    let pos = this.pos;
    while (n > 0x7fffffff) {
      buf[pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    // 31 bits or fewer left: shifts, rather than float division.
    while (n >= 0x80) {
      buf[pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    buf[pos++] = n;
    this.pos = pos;
  }

  /** A varint field. */
  uint(field: number, n: number): void {
    this.buf[this.pos++] = (field << 3) | VARINT;
    this.varint(n);
  }

  /** A length-delimited field's tag and length (`size`); its body follows. */
  len(field: number, size: number): void {
    this.buf[this.pos++] = (field << 3) | LEN;
    this.varint(size);
  }

  /** A string field of `size` UTF-8 bytes. */
  string(field: number, s: string, size: number): void {
    this.len(field, size);
    this.pos += this.buf.write(s, this.pos, size, "utf8");
  }

  bytes(field: number, b: Uint8Array): void {
    this.len(field, b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }

  /**
   * The entries of a map<string, string> field as measureStringMap measured
   * them, their sizes in `sizes` from `at`; returns where the next map's start.
   */
  stringMap(field: number, map: Readonly<Record<string, string>>, sizes: readonly number[], at: number): number {
    for (const key of mapKeys(map)) {
      this.len(field, sizes[at + 2]);
      this.string(1, key, sizes[at]);
      this.string(2, map[key], sizes[at + 1]);
      at += 3;
    }
    return at;
  }

  /** Raw bytes with no tag (a prefix such as a magic number). */
  raw(b: Uint8Array): void {
    // For the few bytes of a prefix a loop costs less than set(), a builtin call.
    const n = b.byteLength;
    if (n <= 16) {
      const buf = this.buf;
      const pos = this.pos;
      for (let i = 0; i < n; i++) buf[pos + i] = b[i];
      this.pos = pos + n;
      return;
    }
    this.buf.set(b, this.pos);
    this.pos += n;
  }
}
