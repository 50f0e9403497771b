/** Item ids written as bytes (src/queue/item-ids.ts) are the ids as text. */
import { describe, expect, it } from "vitest";
import { ItemIds } from "../../src/queue/item-ids.js";
import { newItemId } from "../../src/queue/envelope.js";
import { ProtoWriter } from "../../src/wire/proto-writer.js";

function written(ids: ItemIds, i: number): string {
  const w = new ProtoWriter(Buffer.alloc(ids.size(i) + 2, 0xee));
  w.pos = 1;
  ids.write(i, w);
  expect(w.pos).toBe(ids.size(i) + 1);
  expect([w.buf[0], w.buf[w.buf.length - 1]]).toEqual([0xee, 0xee]);
  return w.buf.toString("latin1", 1, w.pos);
}

describe("ItemIds", () => {
  it("writes each id's ASCII bytes, as many as size() says, across base-36 digit counts", () => {
    const ids = ItemIds.next(50_000);
    for (let i = 0; i < ids.count; i++) expect(written(ids, i)).toBe(ids.get(i));
  });

  it("writes ids past 2^31 and up to the largest safe counter, where digits carry across its two parts", () => {
    const starts = [36 ** 5 - 3, 2 ** 31 - 2, 2 ** 32 - 1, 36 ** 6 - 2, 36 ** 10 - 1, 2 ** 40, Number.MAX_SAFE_INTEGER - 5];
    for (const first of starts) {
      const ids = ItemIds.from(first, 6);
      for (let i = 0; i < ids.count; i++) {
        expect(written(ids, i)).toBe(ids.get(i));
        expect(ids.get(i).slice(8)).toBe((first + i).toString(36));
      }
    }
  });

  it("gives an enqueue consecutive ids after the last ones given, each unique", () => {
    const before = newItemId();
    const ids = ItemIds.next(3);
    const after = newItemId();
    const all = [before, ...ids.toArray(), after];
    const counters = all.map((id) => parseInt(id.slice(8), 36));
    expect(counters.map((c) => c - counters[0])).toEqual([0, 1, 2, 3, 4]);
    expect(new Set(all.map((id) => id.slice(0, 8))).size).toBe(1);
    expect(all.every((id) => /^[A-Za-z0-9_-]{8}[0-9a-z]+$/.test(id))).toBe(true);
  });
});
