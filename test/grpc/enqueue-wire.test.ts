/**
 * The hand-written Enqueue wire forms (src/grpc/enqueue-wire.ts) held to
 * protobuf-es: the encoders write its bytes, and the decoders accept exactly
 * what fromBinary accepts and return the same message, or fail with the same
 * error, on generated messages, on loose encodings (fields out of order and
 * repeated, unknown fields of every wire type, wrong wire types, invalid
 * UTF-8), and on mangled and truncated bytes. Inputs are seeded, so a failure
 * reproduces.
 */
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  type EnqueueRequest,
  EnqueueRequestSchema,
  EnqueueResponseSchema,
  EnqueueStreamRequestSchema,
  EnqueueStreamResponseSchema,
} from "../../src/gen/switchyard/v1/queue_pb.js";
import {
  decodeEnqueueRequest,
  decodeEnqueueResponse,
  encodeEnqueueRequest,
  encodeEnqueueResponse,
  encodeEnqueueResponseIds,
  decodeEnqueueStreamResponse,
  encodeEnqueueStreamIds,
  encodeEnqueueStreamRequest,
  readEnqueueRequest,
  readClientStreamRequest,
  readEnqueueStreamRequest,
  type EnqueueCall,
  type EnqueueRequestFields,
  type EnqueueStreamCall,
} from "../../src/grpc/enqueue-wire.js";
import { ItemIds } from "../../src/queue/item-ids.js";
import { ascii, asciiHeaders, below, bytes, random, text } from "../helpers/random.js";
import {
  expectSameAsProtobufEs, headerKeys, headers, int32, int64, looseDuration, looseHeader, looseString, mangle,
  type Next, outcome, unknownField, wrongWireType,
} from "../helpers/wire.js";

const sameRequest = (input: Uint8Array) => expectSameAsProtobufEs(EnqueueRequestSchema, decodeEnqueueRequest, input);
const sameResponse = (input: Uint8Array) => expectSameAsProtobufEs(EnqueueResponseSchema, decodeEnqueueResponse, input);

function duration(next: Next) {
  return next() < 0.6 ? undefined : { seconds: int64(next), nanos: int32(next) };
}

/** An item as a client could build it: now and then with a time, a delay or an idempotency key. */
function item(next: Next) {
  return {
    payload: bytes(next, next() < 0.1 ? 300 : 20),
    headers: next() < 0.3 ? headers(next) : {},
    notBefore: next() < 0.1 ? { seconds: int64(next), nanos: int32(next) } : undefined,
    delay: duration(next) && next() < 0.2 ? { seconds: int64(next), nanos: int32(next) } : undefined,
    idempotencyKey: next() < 0.15 ? text(next, 30) : "",
  };
}

/** A request as a client could build it. */
function request(next: Next): EnqueueRequest {
  return create(EnqueueRequestSchema, {
    queue: next() < 0.1 ? "" : text(next, 20),
    items: Array.from({ length: below(next, 20) }, () => item(next)),
    ttl: duration(next),
    minReplicas: next() < 0.6 ? 0 : below(next, 2 ** 32),
    replicaTimeout: duration(next),
  });
}

const uint32 = (next: Next) => (next() < 0.3 ? below(next, 200) : below(next, 2 ** 32));

/** A repeated uint32 field: packed, or one value unpacked. */
function looseUints(w: BinaryWriter, no: number, next: Next): void {
  if (next() < 0.5) {
    w.tag(no, WireType.Varint).uint32(uint32(next));
    return;
  }
  w.tag(no, WireType.LengthDelimited).fork();
  for (let n = below(next, 4); n > 0; n--) w.uint32(uint32(next));
  w.join();
}

function looseItem(w: BinaryWriter, next: Next): void {
  for (let n = below(next, 5); n > 0; n--) {
    const r = next();
    if (r < 0.3) w.tag(1, WireType.LengthDelimited).bytes(bytes(next, 20));
    else if (r < 0.7) {
      w.tag(2, WireType.LengthDelimited).fork();
      looseHeader(w, next);
      w.join();
    } else if (r < 0.8) {
      // not_before (a Timestamp) or delay (a Duration): the same two fields, so one loose writer serves.
      w.tag(r < 0.75 ? 3 : 4, WireType.LengthDelimited).fork();
      looseDuration(w, next);
      w.join();
    } else if (r < 0.87) looseString(w, 5, next);
    else if (r < 0.98) unknownField(w, next, 6);
    else wrongWireType(w, next, 5);
  }
}

/** Fields of an EnqueueRequest in any order and number, unknown fields between them. */
function looseRequest(next: Next): Uint8Array {
  const w = new BinaryWriter();
  for (let n = below(next, 12); n > 0; n--) {
    const r = next();
    if (r < 0.1) looseString(w, 1, next);
    else if (r < 0.5) {
      w.tag(2, WireType.LengthDelimited).fork();
      looseItem(w, next);
      w.join();
    } else if (r < 0.6 || (r >= 0.7 && r < 0.8)) {
      w.tag(r < 0.6 ? 3 : 5, WireType.LengthDelimited).fork();
      looseDuration(w, next);
      w.join();
    } else if (r < 0.7) w.tag(4, WireType.Varint).uint64(BigInt.asUintN(64, int64(next)));
    else if (r < 0.98) unknownField(w, next, 6);
    else wrongWireType(w, next, 5);
  }
  return w.finish();
}

describe("decodeEnqueueRequest", () => {
  it("decodes 1,000 generated requests as fromBinary does", () => {
    const next = random(1);
    for (let n = 0; n < 1000; n++) expect(sameRequest(toBinary(EnqueueRequestSchema, request(next)))).toBe(true);
  });

  it("decodes 5,000 loose encodings as fromBinary does, and fails where it fails", () => {
    const next = random(2);
    let decoded = 0;
    for (let n = 0; n < 5000; n++) if (sameRequest(looseRequest(next))) decoded++;
    // Both kinds of outcome were compared, most of them successes.
    expect(decoded).toBeGreaterThan(2500);
    expect(decoded).toBeLessThan(5000);
  });

  it("fails on 5,000 mangled and truncated requests exactly where fromBinary fails", () => {
    const next = random(3);
    let decoded = 0;
    for (let n = 0; n < 5000; n++) {
      const valid = next() < 0.5 ? toBinary(EnqueueRequestSchema, request(next)) : looseRequest(next);
      if (sameRequest(mangle(valid, next))) decoded++;
    }
    expect(decoded).toBeGreaterThan(500);
    expect(decoded).toBeLessThan(4500);
  });

  it("keeps the last queue and min_replicas, merges repeated durations, and keeps the last value of a repeated header", () => {
    const w = new BinaryWriter();
    w.tag(1, WireType.LengthDelimited).string("first");
    w.tag(3, WireType.LengthDelimited).fork().tag(1, WireType.Varint).int64(5).tag(2, WireType.Varint).int32(7).join();
    w.tag(4, WireType.Varint).uint32(2);
    w.tag(2, WireType.LengthDelimited).fork();
    w.tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string("k").tag(2, WireType.LengthDelimited).string("old").join();
    // Value before key, and an entry with neither: key "" and value "".
    w.tag(2, WireType.LengthDelimited).fork().tag(2, WireType.LengthDelimited).string("new").tag(1, WireType.LengthDelimited).string("k").join();
    w.tag(2, WireType.LengthDelimited).fork().join();
    w.join();
    w.tag(3, WireType.LengthDelimited).fork().tag(2, WireType.Varint).int32(9).join();
    w.tag(1, WireType.LengthDelimited).string("second");
    w.tag(4, WireType.Varint).uint32(1);
    const r = decodeEnqueueRequest(w.finish());
    expect(r.queue).toBe("second");
    expect(r.minReplicas).toBe(1);
    expect(r.ttl).toMatchObject({ seconds: 5n, nanos: 9 });
    expect(r.replicaTimeout).toBeUndefined();
    expect(r.items).toHaveLength(1);
    expect(r.items[0].payload).toEqual(new Uint8Array(0));
    expect(r.items[0].headers).toEqual({ k: "new", "": "" });
  });

  it("takes a header named __proto__ as a header, not as the object's prototype", () => {
    const w = new BinaryWriter();
    w.tag(2, WireType.LengthDelimited).fork();
    w.tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string("__proto__").tag(2, WireType.LengthDelimited).string("v").join();
    w.join();
    const { headers } = decodeEnqueueRequest(w.finish()).items[0];
    expect(Object.keys(headers)).toEqual(["__proto__"]);
    expect(Object.getPrototypeOf(headers)).toBe(Object.prototype);
  });

  it("refuses invalid UTF-8 in the queue, a header key or a header value, and keeps a byte-order mark", () => {
    const invalid = Uint8Array.from([0x61, 0xff]);
    const queue = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(invalid).finish();
    const entry = (key: Uint8Array, value: Uint8Array) =>
      new BinaryWriter()
        .tag(2, WireType.LengthDelimited).fork()
        .tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).bytes(key).tag(2, WireType.LengthDelimited).bytes(value).join()
        .join()
        .finish();
    for (const input of [queue, entry(invalid, Buffer.from("v")), entry(Buffer.from("k"), invalid)]) {
      expect(() => decodeEnqueueRequest(input)).toThrow("The encoded data was not valid for encoding utf-8");
      expect(sameRequest(input)).toBe(false);
    }
    const bom = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(Uint8Array.from([0xef, 0xbb, 0xbf, 0x71])).finish();
    expect(decodeEnqueueRequest(bom).queue).toBe("\ufeffq");
  });

  it("fails on a truncated request with fromBinary's reason", () => {
    const whole = toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { queue: "q", items: [{ payload: Buffer.from("payload") }] }));
    expect(() => decodeEnqueueRequest(whole.subarray(0, whole.length - 1))).toThrow("premature EOF");
  });

  it("skips unknown groups nested as deep as fromBinary allows, and fails one level deeper", () => {
    const nested = (depth: number, inItem: boolean) => {
      const w = new BinaryWriter();
      if (inItem) w.tag(2, WireType.LengthDelimited).fork();
      for (let d = 0; d < depth; d++) w.tag(9, WireType.StartGroup);
      for (let d = 0; d < depth; d++) w.tag(9, WireType.EndGroup);
      if (inItem) w.join();
      return w.finish();
    };
    for (const inItem of [false, true]) {
      const limit = inItem ? 98 : 99;
      expect(sameRequest(nested(limit, inItem))).toBe(true);
      expect(() => decodeEnqueueRequest(nested(limit + 1, inItem))).toThrow("maximum recursion depth reached");
      expect(sameRequest(nested(limit + 1, inItem))).toBe(false);
    }
  });

  it("gives payloads as views of the input, as fromBinary does", () => {
    const input = Buffer.from(toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { queue: "q", items: [{ payload: Buffer.from("abc") }] })));
    const { payload } = decodeEnqueueRequest(input).items[0];
    expect(Buffer.isBuffer(payload)).toBe(true);
    expect(payload.buffer).toBe(input.buffer);
  });
});

describe("readEnqueueRequest", () => {
  it("leaves each item's payload and headers in the request's bytes, as fromBinary reads them", () => {
    const next = random(8);
    for (let n = 0; n < 500; n++) {
      const input = next() < 0.5 ? toBinary(EnqueueRequestSchema, request(next)) : looseRequest(next);
      let expected: EnqueueRequest;
      try {
        expected = fromBinary(EnqueueRequestSchema, input);
      } catch {
        continue;
      }
      const { queue, items, minReplicas } = readEnqueueRequest(input);
      expect({ queue, minReplicas }).toEqual({ queue: expected.queue, minReplicas: expected.minReplicas });
      expect(items.count).toBe(expected.items.length);
      expected.items.forEach((item, i) => {
        expect(items.payloadSize(i)).toBe(item.payload.byteLength);
        const copied = new Uint8Array(item.payload.byteLength + 2).fill(0xee);
        items.copyPayload(i, copied, 1);
        expect(Buffer.from(copied.subarray(1, -1)).equals(Buffer.from(item.payload))).toBe(true);
        expect([copied[0], copied[copied.length - 1]]).toEqual([0xee, 0xee]);
        expect(Object.entries(items.headers(i))).toEqual(Object.entries(item.headers));
      });
    }
  });

  it("gives an item without a payload field an empty payload, and one without headers an empty record", () => {
    const input = new BinaryWriter().tag(2, WireType.LengthDelimited).fork().join().finish();
    const { items } = readEnqueueRequest(input);
    expect([items.count, items.payloadSize(0), Object.keys(items.headers(0))]).toEqual([1, 0, []]);
    expect(decodeEnqueueRequest(input).items[0].payload).toEqual(new Uint8Array(0));
  });
});

describe("encodeEnqueueRequest", () => {
  it("writes toBinary's bytes for 1,000 generated requests", () => {
    const next = random(5);
    for (let n = 0; n < 1000; n++) {
      const r = request(next);
      expect(encodeEnqueueRequest(r).toString("hex")).toBe(Buffer.from(toBinary(EnqueueRequestSchema, r)).toString("hex"));
    }
  });

  it("writes multi-byte lengths for large payloads and many items", () => {
    const r = create(EnqueueRequestSchema, {
      queue: "q".repeat(200),
      items: [{ payload: Buffer.alloc(200_000, 7), headers: { big: "v".repeat(20_000) } }, ...Array.from({ length: 1000 }, () => ({ payload: Buffer.alloc(100, 1) }))],
    });
    expect(encodeEnqueueRequest(r).equals(Buffer.from(toBinary(EnqueueRequestSchema, r)))).toBe(true);
  });

  it("refuses a min_replicas that is not a uint32, as toBinary does", () => {
    const r = create(EnqueueRequestSchema, { queue: "q", minReplicas: -1 });
    expect(() => toBinary(EnqueueRequestSchema, r)).toThrow("invalid uint32");
    expect(() => encodeEnqueueRequest(r)).toThrow("invalid uint32");
  });
});

describe("EnqueueResponse", () => {
  const ids = (next: Next) => Array.from({ length: below(next, 30) }, () => (next() < 0.1 ? "" : text(next, 16)));

  it("is written with toBinary's bytes", () => {
    const next = random(6);
    for (let n = 0; n < 500; n++) {
      const r = create(EnqueueResponseSchema, { ids: ids(next), duplicates: next() < 0.3 ? [uint32(next), below(next, 10)] : [] });
      expect(encodeEnqueueResponse(r).toString("hex")).toBe(Buffer.from(toBinary(EnqueueResponseSchema, r)).toString("hex"));
    }
  });

  it("is written for an enqueue's ItemIds with the bytes of its ids as strings", () => {
    for (const count of [0, 1, 7, 1000]) {
      const ids = ItemIds.next(count);
      const expected = toBinary(EnqueueResponseSchema, create(EnqueueResponseSchema, { ids: ids.toArray() }));
      expect(encodeEnqueueResponseIds(ids).equals(Buffer.from(expected))).toBe(true);
    }
  });

  it("is read as fromBinary reads it, mangled and with unknown fields too", () => {
    const next = random(7);
    let decoded = 0;
    for (let n = 0; n < 3000; n++) {
      const w = new BinaryWriter();
      for (const id of ids(next)) {
        if (next() < 0.2) unknownField(w, next, 3);
        looseString(w, 1, next);
        if (next() < 0.1) w.tag(1, WireType.LengthDelimited).string(id);
        if (next() < 0.1) looseUints(w, 2, next);
      }
      const input = n % 2 ? mangle(w.finish(), next) : w.finish();
      if (sameResponse(input)) decoded++;
    }
    expect(decoded).toBeGreaterThan(1000);
    expect(decoded).toBeLessThan(3000);
  });
});

/** The protobuf-es message of what readEnqueueRequest read (as decodeEnqueueRequest makes it). */
function requestMessage(call: EnqueueCall): EnqueueRequest {
  const items = Array.from({ length: call.items.count }, (_, i) => ({
    payload: call.items.payload(i), headers: call.items.givenHeaders(i) ?? {}, ...call.items.givenExtras(i),
  }));
  return create(EnqueueRequestSchema, { queue: call.queue, items, ttl: call.ttl, minReplicas: call.minReplicas, replicaTimeout: call.replicaTimeout });
}

/** readEnqueueStreamRequest's result (or `read`'s) as the protobuf-es message. */
function decodeStreamRequest(bytes: Uint8Array, read: (b: Uint8Array) => EnqueueStreamCall | undefined = readEnqueueStreamRequest) {
  const call = read(bytes);
  if (!call) return "left to the general reader";
  return create(EnqueueStreamRequestSchema, { id: call.id, request: call.request ? requestMessage(call.request) : undefined });
}


describe("EnqueueStreamRequest", () => {
  const same = (input: Uint8Array) => expectSameAsProtobufEs(EnqueueStreamRequestSchema, decodeStreamRequest, input);
  /** An id and a request field (loose, sometimes repeated, which merges), unknown fields between, in any order. */
  function loose(next: Next): Uint8Array {
    const w = new BinaryWriter();
    for (let f = below(next, 5); f >= 0; f--) {
      const r = next();
      if (r < 0.3) w.tag(1, WireType.Varint).uint32(uint32(next));
      else if (r < 0.8) w.tag(2, WireType.LengthDelimited).bytes(looseRequest(next));
      else unknownField(w, next, 3);
    }
    return w.finish();
  }

  it("is read as fromBinary reads it: generated, loose (a repeated request merges) and mangled", () => {
    const next = random(11);
    let decoded = 0;
    for (let n = 0; n < 3000; n++) {
      const input =
        n % 3 === 0
          ? toBinary(EnqueueStreamRequestSchema, create(EnqueueStreamRequestSchema, { id: uint32(next), request: next() < 0.9 ? request(next) : undefined }))
          : n % 3 === 1
            ? loose(next)
            : mangle(loose(next), next);
      if (same(input)) decoded++;
    }
    expect(decoded).toBeGreaterThan(1500);
    expect(decoded).toBeLessThan(3000);
  });

  /** A request as the client writes most: an ASCII queue name, items of a payload and now and then ASCII headers. */
  function plain(next: Next) {
    return { queue: ascii(next, 24), items: Array.from({ length: below(next, 12) }, () => ({ payload: bytes(next, next() < 0.1 ? 300 : 60), headers: next() < 0.3 ? asciiHeaders(next, 3) : {} })) };
  }

  it("is read in one pass (readClientStreamRequest) as fromBinary reads it, when the client wrote a plain request", () => {
    const next = random(13);
    for (let n = 0; n < 1000; n++) {
      const input = encodeEnqueueStreamRequest(n % 10 === 0 ? 0 : uint32(next), plain(next));
      expectSameAsProtobufEs(EnqueueStreamRequestSchema, (b) => decodeStreamRequest(b, readClientStreamRequest), input);
    }
  });

  it("leaves to the general reader what the one pass does not read, with the same outcome", () => {
    const one = { queue: "q", items: [{ payload: Uint8Array.of(1, 2) }] };
    const written = (request: EnqueueRequestFields, id = 7) => encodeEnqueueStreamRequest(id, request);
    const idAfter = new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(encodeEnqueueRequest(one)).tag(1, WireType.Varint).uint32(7).finish();
    const inputs = [
      written({ queue: "schlüssel", items: one.items }),
      written({ queue: "q", items: [{ payload: Uint8Array.of(1), headers: { schlüssel: "v" } }] }),
      written({ queue: "q", items: [{ payload: Uint8Array.of(1), headers: { k: "wert\u00e9" } }] }),
      new BinaryWriter().tag(1, WireType.Varint).uint32(7).tag(2, WireType.LengthDelimited).fork()
        .tag(2, WireType.LengthDelimited).fork().tag(2, WireType.LengthDelimited).fork().tag(2, WireType.LengthDelimited).string("v").tag(1, WireType.LengthDelimited).string("k").join().join().join().finish(),
      new BinaryWriter().tag(2, WireType.LengthDelimited).fork().tag(2, WireType.LengthDelimited).fork()
        .tag(2, WireType.LengthDelimited).fork().join().tag(1, WireType.LengthDelimited).bytes(Uint8Array.of(1)).join().join().finish(),
      written({ queue: "q", items: [{ payload: Uint8Array.of(1), idempotencyKey: "k" }] }),
      written({ ...one, ttl: { $typeName: "google.protobuf.Duration", seconds: 5n, nanos: 0 } }),
      idAfter,
      Buffer.concat([written(one), written(one)]),
      new BinaryWriter().tag(1, WireType.Varint).uint64(2n ** 32n).finish(),
      Uint8Array.of(0x08, 0x07, 0x12),
      Uint8Array.of(0x12, 0x04, 0x12, 0x02, 0x0a, 0x05),
    ];
    for (const input of inputs) {
      expect(readClientStreamRequest(input)).toBeUndefined();
      same(input);
    }
  });

  it("is read as fromBinary reads it when a plain request the client wrote comes mangled or truncated", () => {
    const next = random(14);
    let decoded = 0;
    for (let n = 0; n < 3000; n++) if (same(mangle(encodeEnqueueStreamRequest(uint32(next), plain(next)), next))) decoded++;
    expect(decoded).toBeGreaterThan(300);
    expect(decoded).toBeLessThan(3000);
  });

  it("is written with toBinary's bytes", () => {
    const next = random(12);
    for (let n = 0; n < 500; n++) {
      const id = uint32(next);
      const r = request(next);
      const expected = toBinary(EnqueueStreamRequestSchema, create(EnqueueStreamRequestSchema, { id, request: r }));
      expect(encodeEnqueueStreamRequest(id, r).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
    }
  });
});

describe("EnqueueStreamResponse", () => {
  it("is written for an enqueue's ItemIds with toBinary's bytes", () => {
    for (const [id, count] of [[0, 0], [1, 1], [300, 7], [2 ** 32 - 1, 1000]]) {
      const ids = ItemIds.next(count);
      const expected = toBinary(EnqueueStreamResponseSchema, create(EnqueueStreamResponseSchema, { id, ids: ids.toArray() }));
      expect(encodeEnqueueStreamIds(id, ids).equals(Buffer.from(expected))).toBe(true);
    }
  });

  it("is read as fromBinary reads it, with statuses, unknown fields and mangled bytes", () => {
    const next = random(13);
    let decoded = 0;
    for (let n = 0; n < 3000; n++) {
      const w = new BinaryWriter();
      for (let f = below(next, 8); f >= 0; f--) {
        const r = next();
        if (r < 0.15) w.tag(1, WireType.Varint).uint32(uint32(next));
        else if (r < 0.3) w.tag(2, WireType.Varint).int32(int32(next));
        else if (r < 0.45) looseString(w, 3, next);
        else if (r < 0.8) looseString(w, 4, next);
        else if (r < 0.9) looseUints(w, 5, next);
        else unknownField(w, next, 6);
      }
      const input = n % 2 ? mangle(w.finish(), next) : w.finish();
      if (expectSameAsProtobufEs(EnqueueStreamResponseSchema, decodeEnqueueStreamResponse, input)) decoded++;
    }
    expect(decoded).toBeGreaterThan(1000);
    expect(decoded).toBeLessThan(3000);
  });
});
