/**
 * The stored envelope is written by hand (src/queue/envelope.ts); these tests
 * hold it byte for byte to what protobuf-es writes for the same Envelope, so
 * the stored format cannot drift from queue.proto.
 */
import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { EnvelopeSchema } from "../../src/gen/switchyard/v1/queue_pb.js";
import { decodeItem, encodeItem, encodeItems, newItemId } from "../../src/queue/envelope.js";
import { ItemIds } from "../../src/queue/item-ids.js";
import { itemsOf, type NewItem } from "../../src/queue/new-items.js";
import { random, text } from "../helpers/random.js";

function reference(id: string, payload: Uint8Array, headers: Record<string, string>, enqueueTimeMs: number): Buffer {
  const body = toBinary(EnvelopeSchema, create(EnvelopeSchema, { id, payload, headers, enqueueTimeMs: BigInt(enqueueTimeMs) }));
  return Buffer.concat([Buffer.from("SYE1"), body]);
}

function expectSameBytes(id: string, payload: Uint8Array, headers: Record<string, string>, enqueueTimeMs: number): void {
  expect(encodeItem(id, payload, headers, enqueueTimeMs).toString("hex")).toBe(reference(id, payload, headers, enqueueTimeMs).toString("hex"));
}

describe("encodeItem", () => {
  it("writes protobuf-es' bytes for an ordinary item", () => {
    expectSameBytes(newItemId(), Buffer.alloc(100, 120), {}, 1_764_480_000_123);
  });

  it("leaves out empty fields as protobuf-es does", () => {
    expectSameBytes("", new Uint8Array(0), {}, 0);
    expectSameBytes("id", new Uint8Array(0), {}, 0);
    expectSameBytes("", Buffer.from("x"), {}, 0);
    expectSameBytes("", new Uint8Array(0), {}, 1);
  });

  it("writes every header entry with its key and value, even empty ones", () => {
    expectSameBytes("id", Buffer.from("p"), { "": "" }, 5);
    expectSameBytes("id", Buffer.from("p"), { k: "" }, 5);
    expectSameBytes("id", Buffer.from("p"), { "": "v" }, 5);
  });

  it("writes unicode ids and headers as UTF-8, a lone surrogate as U+FFFD", () => {
    expectSameBytes("ïd-😀", Buffer.from("p"), { traceparent: "00-ab", "schlüssel": "wert 中文 😀", "\ud800": "x\udfff" }, 7);
  });

  it("keeps protobuf-es' header order, integer-like keys included", () => {
    expectSameBytes("id", Buffer.from("p"), { b: "1", "10": "2", a: "3", "2": "4" }, 9);
  });

  it("writes multi-byte lengths for large payloads and headers", () => {
    expectSameBytes("id", Buffer.alloc(200_000, 7), { big: "v".repeat(20_000) }, 11);
    expectSameBytes("id", Buffer.alloc(127), {}, 127);
    expectSameBytes("id", Buffer.alloc(128), {}, 128);
    expectSameBytes("id", Buffer.alloc(16_384), {}, 16_384);
  });

  it("writes enqueue times up to the largest safe integer", () => {
    for (const t of [1, 127, 128, 16_383, 16_384, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 35, Number.MAX_SAFE_INTEGER]) expectSameBytes("id", Buffer.from("p"), {}, t);
  });

  it("writes many headers", () => {
    const headers = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`header-${i}`, `value ${i} ✓`]));
    expectSameBytes("id", Buffer.from("p"), headers, 13);
  });

  it("matches protobuf-es on 2,000 varied items", () => {
    const next = random(42);
    for (let n = 0; n < 2000; n++) {
      const id = next() < 0.1 ? "" : text(next, 20);
      const payload = Buffer.from(Array.from({ length: Math.floor(next() ** 4 * 3000) }, () => Math.floor(next() * 256)));
      const headers: Record<string, string> = {};
      const count = Math.floor(next() * 6);
      for (let h = 0; h < count; h++) headers[next() < 0.2 ? String(Math.floor(next() * 100)) : text(next, 12)] = text(next, 200);
      const t = next() < 0.1 ? 0 : Math.floor(next() * Number.MAX_SAFE_INTEGER);
      expectSameBytes(id, payload, headers, t);
    }
  });

  it("decodes back to the same item", () => {
    const payload = Buffer.from("payload ✓");
    const item = decodeItem(encodeItem("id-1", payload, { h: "ü" }, 1_764_480_000_123));
    expect({ ...item, payload: Buffer.from(item.payload).toString() }).toEqual({
      id: "id-1", payload: "payload ✓", headers: { h: "ü" }, enqueueTimeMs: 1_764_480_000_123, deliveries: 0, lastError: "",
    });
  });

  it("refuses an enqueue time that is not a non-negative integer", () => {
    expect(() => encodeItem("id", Buffer.from("p"), {}, -1)).toThrow(RangeError);
    expect(() => encodeItem("id", Buffer.from("p"), {}, 1.5)).toThrow(RangeError);
  });
});

describe("encodeItems", () => {
  /** Splits RESP bulk strings ("$<size>\r\n<bytes>\r\n" each) back into values. */
  function bulkStrings(bytes: Buffer): Buffer[] {
    const values: Buffer[] = [];
    let pos = 0;
    while (pos < bytes.length) {
      expect(String.fromCharCode(bytes[pos])).toBe("$");
      const head = bytes.indexOf("\r\n", pos);
      const size = Number(bytes.toString("latin1", pos + 1, head));
      values.push(bytes.subarray(head + 2, head + 2 + size));
      expect(bytes.toString("latin1", head + 2 + size, head + 4 + size)).toBe("\r\n");
      pos = head + 4 + size;
    }
    return values;
  }

  it("frames each item's encodeItem bytes as a RESP bulk string, in order, in one buffer", () => {
    const next = random(43);
    for (let n = 0; n < 200; n++) {
      const items: NewItem[] = Array.from({ length: Math.floor(next() * 20) }, () => ({
        payload: Buffer.from(Array.from({ length: Math.floor(next() ** 3 * 20_000) }, () => Math.floor(next() * 256))),
        headers: next() < 0.3 ? { [text(next, 5)]: text(next, 30), b: "1", "10": "2" } : next() < 0.5 ? ({} as Record<string, string>) : undefined,
      }));
      const ids = ItemIds.next(items.length);
      const t = Math.floor(next() * 2 ** 42);
      const framed = encodeItems(ids, itemsOf(items), t);
      expect(framed.count).toBe(items.length);
      const expected = items.map((item, i) => encodeItem(ids.get(i), item.payload, item.headers ?? {}, t).toString("hex"));
      expect(bulkStrings(framed.bytes).map((v) => v.toString("hex"))).toEqual(expected);
    }
  });
});
