/** Digits of a non-negative integer below 2^31 written in `base`: sizes in RESP frames, counters in item ids. */
export function digitCount(n: number, base: number): number {
  let digits = 1;
  while (n >= base) {
    n = (n / base) | 0;
    digits++;
  }
  return digits;
}
