/**
 * Item ids: a random per-process prefix and a counter in base 36, unique
 * across instances. The ids of one enqueue take consecutive counters, so
 * ItemIds holds them as a range and writes each one's bytes where it goes
 * (the envelope, the Enqueue response) without a string apiece.
 */
import { randomBytes } from "node:crypto";
import type { ProtoWriter } from "../wire/proto-writer.js";
import { digitCount } from "../wire/digits.js";

const PREFIX_TEXT = randomBytes(6).toString("base64url");
const PREFIX = Buffer.from(PREFIX_TEXT, "latin1");
let counter = 0;

/** 36^5: the low five base-36 digits of any id fit 31 bits. */
const LOW = 36 ** 5;

/** Writes n < 2^31 in base 36, zero-padded to `width` digits, ending before `end`; returns where it starts. */
function write36(buf: Buffer, end: number, n: number, width: number): number {
  let pos = end;
  for (let written = 0; written < width || n > 0; written++) {
    const digit = n % 36;
    buf[--pos] = digit < 10 ? 48 + digit : 87 + digit; // 0-9, then a-z
    n = (n / 36) | 0;
  }
  return pos;
}

/** The ids of one enqueue's items, in item order. */
export class ItemIds {
  private constructor(
    private readonly first: number,
    readonly count: number,
  ) {}

  /** `count` new ids. */
  static next(count: number): ItemIds {
    const ids = new ItemIds(counter + 1, count);
    counter += count;
    return ids;
  }

  /** Id i. */
  get(i: number): string {
    return PREFIX_TEXT + (this.first + i).toString(36);
  }

  /** The ids from counter `first` on, as next() would hand them out there (tests reach far counters with it). */
  static from(first: number, count: number): ItemIds {
    return new ItemIds(first, count);
  }

  toArray(): string[] {
    return Array.from({ length: this.count }, (_, i) => this.get(i));
  }

  /** Bytes of id i (ASCII). */
  size(i: number): number {
    // Counters pass 2^31 (a billion items a day, for a month): split in two parts of 31 bits or fewer.
    const n = this.first + i;
    if (n < LOW) return PREFIX.length + digitCount(n, 36);
    return PREFIX.length + digitCount(Math.floor(n / LOW), 36) + 5;
  }

  /** Writes id i's bytes, get(i) in ASCII. */
  write(i: number, w: ProtoWriter): void {
    w.raw(PREFIX);
    const n = this.first + i;
    const end = w.pos + this.size(i) - PREFIX.length;
    if (n < LOW) write36(w.buf, end, n, 1);
    else write36(w.buf, write36(w.buf, end, n % LOW, 5), Math.floor(n / LOW), 1);
    w.pos = end;
  }
}
