/** Seeded random inputs for property-style tests, so that a failure reproduces. */

/** A seeded generator (mulberry32) of numbers in [0, 1). */
export function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Characters that exercise UTF-8: 1- to 4-byte sequences, NUL, DEL, and U+FFFF. */
const alphabet = ["a", "Z", "0", "-", " ", "é", "ß", "中", "文", "😀", "\u0000", "\u007f", "\u0080", "\u07ff", "\u0800", "\uffff"];

/** A string of up to `maxLength` characters from the alphabet above. */
export function text(next: () => number, maxLength: number): string {
  const length = Math.floor(next() * (maxLength + 1));
  return Array.from({ length }, () => alphabet[Math.floor(next() * alphabet.length)]).join("");
}

/** A string of up to `maxLength` ASCII characters (0–127). */
export function ascii(next: () => number, maxLength: number): string {
  return Array.from({ length: Math.floor(next() * (maxLength + 1)) }, () => String.fromCharCode(Math.floor(next() * 128))).join("");
}

/** Up to `maxCount` headers of ASCII keys and values, now and then one named "__proto__". */
export function asciiHeaders(next: () => number, maxCount: number): Record<string, string> {
  return Object.fromEntries(Array.from({ length: Math.floor(next() * (maxCount + 1)) }, () => [next() < 0.1 ? "__proto__" : ascii(next, 8), ascii(next, 20)]));
}

/** An integer in [0, n). */
export const below = (next: () => number, n: number) => Math.floor(next() * n);

/** Up to `maxLength` random bytes. */
export function bytes(next: () => number, maxLength: number): Uint8Array {
  return Uint8Array.from({ length: below(next, maxLength + 1) }, () => below(next, 256));
}
