/**
 * Item ids: a random per-process prefix and a counter in base 36, unique
 * across instances. The ids of one enqueue take consecutive counters, so
 * ItemIds holds them as a range and writes each one's bytes where it goes
 * (the envelope, the Enqueue response) without a string apiece.
 */
import { randomBytes } from "node:crypto";
import type { ProtoWriter } from "../wire/proto-writer.js";

const PREFIX_TEXT = randomBytes(6).toString("base64url");
const PREFIX = Buffer.from(PREFIX_TEXT, "latin1");
let counter = 0;

/** Digits of `n` (a non-negative safe integer) in base 36. */
function digits36(n: number): number {
  let digits = 1;
  while (n >= 36) {
    n = Math.floor(n / 36);
    digits++;
  }
  return digits;
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

  toArray(): string[] {
    return Array.from({ length: this.count }, (_, i) => this.get(i));
  }

  /** Bytes of id i (ASCII). */
  size(i: number): number {
    return PREFIX.length + digits36(this.first + i);
  }

  /** Writes id i's bytes, get(i) in ASCII. */
  write(i: number, w: ProtoWriter): void {
    w.raw(PREFIX);
    let n = this.first + i;
    let pos = (w.pos += digits36(n));
    do {
      const digit = n % 36;
      w.buf[--pos] = digit < 10 ? 48 + digit : 87 + digit; // 0-9, then a-z
      n = Math.floor(n / 36);
    } while (n > 0);
  }
}
