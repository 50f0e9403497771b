/**
 * The few protobuf wire-format pieces Switchyard writes by hand on its hot
 * paths (stored envelopes, Lease deliveries), where protobuf-es' generic
 * writer cost several µs per item. Callers measure first, allocate once, then
 * write; tests compare the bytes with protobuf-es' own.
 */

const VARINT = 0;
const LEN = 2;

/** Bytes of `n` (a non-negative safe integer) as a varint. */
export function varintSize(n: number): number {
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

/** Writes fields 1–15 into a buffer measured beforehand. */
export class ProtoWriter {
  pos = 0;
  constructor(readonly buf: Buffer) {}

  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.pos++] = n;
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

  /** Raw bytes with no tag (a prefix such as a magic number). */
  raw(b: Uint8Array): void {
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
}
