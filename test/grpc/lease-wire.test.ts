/**
 * The hand-written Lease wire forms of the client (src/grpc/lease-wire.ts)
 * held to protobuf-es: decodeLeaseResponse accepts exactly what fromBinary
 * accepts and returns the same message, or fails with the same error, on
 * generated responses of every kind, on loose encodings (fields out of order
 * and repeated, unknown fields of every wire type, wrong wire types, tags
 * written in more bytes than they need, invalid UTF-8) and on mangled and
 * truncated bytes; encodeAckBatch writes toBinary's bytes. Inputs are seeded.
 */
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { LeaseRequestSchema, type LeaseResponse, LeaseResponseSchema } from "../../src/gen/switchyard/v1/queue_pb.js";
import { encodeDeliveries } from "../../src/grpc/delivery-wire.js";
import { decodeLeaseRequest, decodeLeaseResponse, encodeAckBatch, readAckBatch, readServerDeliveries } from "../../src/grpc/lease-wire.js";
import { ascii, asciiHeaders, below, bytes, random, text } from "../helpers/random.js";
import {
  expectSameAsProtobufEs, headers, int32, int64, looseDuration, looseHeader, looseString, mangle, type Next, outcome, unknownField, wrongWireType,
} from "../helpers/wire.js";

const same = (input: Uint8Array) => expectSameAsProtobufEs(LeaseResponseSchema, decodeLeaseResponse, input);

const uint64 = (next: Next) => (next() < 0.5 ? BigInt(below(next, 100_000)) : BigInt.asUintN(64, int64(next)));

function delivery(next: Next) {
  return {
    leaseToken: next() < 0.05 ? "" : `r.${below(next, 1e6)}.abcdefghij.${text(next, 12)}`,
    fence: uint64(next),
    id: next() < 0.1 ? "" : text(next, 26),
    payload: bytes(next, next() < 0.1 ? 400 : 40),
    headers: next() < 0.3 ? headers(next) : {},
    enqueueTime: next() < 0.8 ? { seconds: int64(next), nanos: int32(next) } : undefined,
    deliveryCount: next() < 0.7 ? 1 + below(next, 5) : below(next, 2 ** 32),
    queue: next() < 0.1 ? "" : text(next, 16),
    lastError: next() < 0.8 ? "" : text(next, 40),
  };
}

/** A response the server could send: mostly deliveries, now and then another kind. */
function response(next: Next): LeaseResponse {
  const r = next();
  if (r < 0.7) return create(LeaseResponseSchema, { kind: { case: "deliveries", value: { deliveries: Array.from({ length: below(next, 12) }, () => delivery(next)) } } });
  if (r < 0.8) return create(LeaseResponseSchema, { kind: { case: "heartbeat", value: { serverTime: { seconds: int64(next), nanos: int32(next) } } } });
  if (r < 0.9) return create(LeaseResponseSchema, { kind: { case: "settleResult", value: { leaseToken: text(next, 20), code: int32(next), message: text(next, 30), reason: "LEASE_NOT_HELD" } } });
  if (r < 0.95) return create(LeaseResponseSchema, { kind: { case: "opened", value: { queue: text(next, 10), ackBatches: true, releases: next() < 0.5, maxCredit: below(next, 5000) } } });
  return create(LeaseResponseSchema, {});
}

/** A tag written in `extra` more bytes than it needs (a varint may carry trailing zero groups). */
function longTag(w: BinaryWriter, no: number, wireType: WireType, extra: number): void {
  let tag = (no << 3) | wireType;
  const out: number[] = [];
  while (tag >= 0x80) {
    out.push((tag & 0x7f) | 0x80);
    tag >>>= 7;
  }
  for (let i = 0; i < extra; i++) {
    out.push(tag | 0x80);
    tag = 0;
  }
  out.push(tag);
  w.raw(Uint8Array.from(out));
}

function looseDelivery(w: BinaryWriter, next: Next): void {
  for (let n = below(next, 10); n > 0; n--) {
    const r = next();
    const no = 1 + below(next, 9);
    if (r < 0.05) longTag(w, no, no === 2 || no === 7 ? WireType.Varint : WireType.LengthDelimited, 1 + below(next, 2));
    else if (r < 0.08) {
      wrongWireType(w, next, 9);
      continue;
    } else if (r < 0.14) {
      unknownField(w, next, 10);
      continue;
    } else w.tag(no, no === 2 || no === 7 ? WireType.Varint : WireType.LengthDelimited);
    switch (no) {
      case 2:
        w.uint64(uint64(next));
        break;
      case 7:
        w.uint32(below(next, 2 ** 32));
        break;
      case 4:
        w.bytes(bytes(next, 30));
        break;
      case 5:
        w.fork();
        looseHeader(w, next);
        w.join();
        break;
      case 6:
        w.fork();
        looseDuration(w, next); // a Timestamp has the same two fields
        w.join();
        break;
      default: {
        // a string field: looseString writes its own tag, so write the body as it would
        const inner = new BinaryWriter();
        looseString(inner, 1, next);
        w.raw(inner.finish().subarray(1));
      }
    }
  }
}

/** A LeaseResponse's fields in any order and number: deliveries mostly, repeated, other kinds and unknown fields between. */
function looseResponse(next: Next): Uint8Array {
  const w = new BinaryWriter();
  for (let n = 1 + below(next, 3); n > 0; n--) {
    const r = next();
    if (r < 0.85) {
      if (next() < 0.05) longTag(w, 2, WireType.LengthDelimited, 1);
      else w.tag(2, WireType.LengthDelimited);
      w.fork();
      for (let m = below(next, 5); m > 0; m--) {
        const q = next();
        if (q < 0.85) {
          w.tag(1, WireType.LengthDelimited).fork();
          looseDelivery(w, next);
          w.join();
        } else if (q < 0.95) unknownField(w, next, 2);
        else wrongWireType(w, next, 1);
      }
      w.join();
    } else if (r < 0.9) w.tag(3, WireType.LengthDelimited).bytes(toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "heartbeat", value: {} } })).subarray(2));
    else if (r < 0.97) unknownField(w, next, 6);
    else wrongWireType(w, next, 5);
  }
  return w.finish();
}

describe("decodeLeaseResponse", () => {
  it("decodes 2,000 generated responses of every kind as fromBinary does", () => {
    const next = random(31);
    for (let n = 0; n < 2000; n++) expect(same(toBinary(LeaseResponseSchema, response(next)))).toBe(true);
  });

  it("decodes what the server writes (delivery-wire.ts) as fromBinary does", () => {
    const next = random(32);
    for (let n = 0; n < 300; n++) {
      const deliveries = Array.from({ length: below(next, 20) }, () => {
        const d = delivery(next);
        const ms = below(next, 2e12);
        return {
          token: d.leaseToken, fence: below(next, 2 ** 40), deliveryCount: 1 + below(next, 20), queue: d.queue, lastError: d.lastError,
          item: { id: d.id, payload: d.payload, headers: d.headers, enqueueTimeMs: ms, deliveries: 0, lastError: d.lastError },
        };
      });
      expect(same(encodeDeliveries(deliveries as never).bytes)).toBe(true);
    }
  });

  it("reads the server's usual deliveries in one pass (readServerDeliveries) as fromBinary does", () => {
    const next = random(36);
    for (let n = 0; n < 500; n++) {
      const deliveries = Array.from({ length: below(next, 8) }, () => ({
        token: `${below(next, 2 ** 49)}@${ascii(next, 12)}`, fence: next() < 0.5 ? below(next, 1000) : below(next, 2 ** 49), deliveryCount: below(next, 2 ** 32),
        queue: ascii(next, 16), lastError: next() < 0.7 ? "" : ascii(next, 300),
        item: { id: ascii(next, 26), payload: bytes(next, next() < 0.1 ? 300 : 40), headers: next() < 0.3 ? asciiHeaders(next, 3) : {}, enqueueTimeMs: below(next, 2 ** 42), deliveries: 0, lastError: "" },
      }));
      const input = encodeDeliveries(deliveries as never).bytes;
      expectSameAsProtobufEs(LeaseResponseSchema, (b) => readServerDeliveries(b) ?? "left to the general reader", input);
    }
  });

  it("leaves to the general reader what the one pass does not read, with the same outcome", () => {
    const d = { token: "t", fence: 1, deliveryCount: 1, queue: "q", lastError: "", item: { id: "i", payload: new Uint8Array(), headers: {}, enqueueTimeMs: 5, deliveries: 0, lastError: "" } };
    const written = (over: object) => encodeDeliveries([{ ...d, ...over }] as never).bytes;
    const inputs = [
      written({ item: { ...d.item, headers: { schlüssel: "v" } } }),
      written({ item: { ...d.item, headers: { k: "wert\u00e9" } } }),
      // enqueue_time twice: fromBinary merges the second into the first (its seconds stay)
      new BinaryWriter().tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).fork()
        .tag(6, WireType.LengthDelimited).fork().tag(1, WireType.Varint).int64(5n).join()
        .tag(6, WireType.LengthDelimited).fork().tag(2, WireType.Varint).int32(7).join().join().join().finish(),
      // a header after the delivery's last field
      new BinaryWriter().tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).fork()
        .tag(9, WireType.LengthDelimited).string("e").tag(5, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string("k").join().join().join().finish(),
      written({ token: "schlüssel" }),
      written({ fence: 2 ** 49 }),
      written({ item: { ...d.item, enqueueTimeMs: -1500 } }),
      toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "deliveries", value: { deliveries: [{ enqueueTime: { seconds: 1n, nanos: -1 } }] } } })),
      Buffer.concat([written({}), written({})]),
      Uint8Array.of(0x12),
      Uint8Array.of(0x12, 0x02, 0x0a),
    ];
    for (const input of inputs) {
      expect(readServerDeliveries(input)).toBeUndefined();
      same(input);
    }
  });

  it("decodes what the server writes, mangled and truncated, exactly as fromBinary does", () => {
    const next = random(37);
    let decoded = 0;
    for (let n = 0; n < 3000; n++) {
      const d = delivery(next);
      const written = encodeDeliveries([{
        token: d.leaseToken, fence: below(next, 2 ** 40), deliveryCount: 1 + below(next, 20), queue: d.queue, lastError: d.lastError,
        item: { id: d.id, payload: d.payload, headers: {}, enqueueTimeMs: below(next, 2e12), deliveries: 0, lastError: d.lastError },
      }] as never).bytes;
      if (same(mangle(written, next))) decoded++;
    }
    expect(decoded).toBeGreaterThan(300);
    expect(decoded).toBeLessThan(3000);
  });

  it("decodes 5,000 loose encodings as fromBinary does, and fails where it fails", () => {
    const next = random(33);
    let decoded = 0;
    for (let n = 0; n < 5000; n++) if (same(looseResponse(next))) decoded++;
    expect(decoded).toBeGreaterThan(2500);
    expect(decoded).toBeLessThan(5000);
  });

  it("fails on 5,000 mangled and truncated responses exactly where fromBinary fails", () => {
    const next = random(34);
    let decoded = 0;
    for (let n = 0; n < 5000; n++) {
      const input = n % 3 ? toBinary(LeaseResponseSchema, response(next)) : looseResponse(next);
      if (same(mangle(input, next))) decoded++;
    }
    expect(decoded).toBeGreaterThan(500);
    expect(decoded).toBeLessThan(5000);
  });

  it("merges repeated batches, keeps the last scalar, and lets a later kind win", () => {
    const batch = (token: string, fence: bigint) =>
      toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "deliveries", value: { deliveries: [{ leaseToken: token, fence }] } } }));
    const two = Buffer.concat([batch("a", 1n), batch("b", 2n)]);
    const merged = decodeLeaseResponse(two);
    expect(merged.kind.case === "deliveries" && merged.kind.value.deliveries.map((d) => [d.leaseToken, d.fence])).toEqual([["a", 1n], ["b", 2n]]);
    const heartbeat = toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "heartbeat", value: {} } }));
    expect(decodeLeaseResponse(Buffer.concat([two, heartbeat])).kind.case).toBe("heartbeat");
    // one delivery whose token and fence are written twice: the last of each
    const w = new BinaryWriter().tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).fork();
    w.tag(1, WireType.LengthDelimited).string("first").tag(2, WireType.Varint).uint64(5n).tag(1, WireType.LengthDelimited).string("last").tag(2, WireType.Varint).uint64(9n);
    const d = decodeLeaseResponse(w.join().join().finish());
    expect(d.kind.case === "deliveries" && [d.kind.value.deliveries[0].leaseToken, d.kind.value.deliveries[0].fence]).toEqual(["last", 9n]);
  });

  it("gives payloads as views of the input, as fromBinary does", () => {
    const input = toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "deliveries", value: { deliveries: [{ leaseToken: "t", payload: Buffer.from("hello") }] } } }));
    const mine = decodeLeaseResponse(input);
    const theirs = fromBinary(LeaseResponseSchema, input);
    for (const m of [mine, theirs]) {
      const p = m.kind.case === "deliveries" ? m.kind.value.deliveries[0].payload : undefined;
      expect(p?.buffer).toBe(input.buffer);
      expect(Buffer.from(p!).toString()).toBe("hello");
    }
  });

  it("skips unknown groups nested as deep as fromBinary allows inside a delivery, and fails one level deeper", () => {
    for (const depth of [90, 96, 97, 98]) {
      const w = new BinaryWriter().tag(2, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).fork();
      w.tag(1, WireType.LengthDelimited).string("t");
      for (let i = 0; i < depth; i++) w.tag(20, WireType.StartGroup);
      for (let i = 0; i < depth; i++) w.tag(20, WireType.EndGroup);
      same(w.join().join().finish());
    }
  });
});

describe("decodeLeaseRequest", () => {
  /** decodeLeaseRequest and fromBinary (unknown fields kept, as the server's default codec read them) agree. */
  const sameRequest = (input: Uint8Array) => {
    const theirs = outcome(() => fromBinary(LeaseRequestSchema, input));
    expect(outcome(() => decodeLeaseRequest(input))).toEqual(theirs);
    return "ok" in theirs;
  };
  const tokens = (next: Next) => Array.from({ length: below(next, 50) }, () => (next() < 0.9 ? `r.${below(next, 1e9)}.abcdefghij.${ascii(next, 20)}` : text(next, 20)));

  it("reads the ack batches encodeAckBatch writes in one pass when their tokens are ASCII, as fromBinary does", () => {
    const next = random(38);
    for (let n = 0; n < 1000; n++) {
      const leaseTokens = Array.from({ length: below(next, 60) }, () => ascii(next, next() < 0.05 ? 300 : 40));
      const input = encodeAckBatch(leaseTokens);
      expect(readAckBatch(input)).toEqual(fromBinary(LeaseRequestSchema, input));
    }
  });

  it("reads every other request, and mangled and truncated batches, as fromBinary does", () => {
    const next = random(39);
    let decoded = 0;
    for (let n = 0; n < 4000; n++) {
      const r = next();
      const input =
        r < 0.4
          ? mangle(encodeAckBatch(tokens(next)), next)
          : r < 0.6
            ? encodeAckBatch(tokens(next))
            : toBinary(LeaseRequestSchema, create(LeaseRequestSchema, r < 0.7 ? { kind: { case: "ack", value: { leaseToken: text(next, 30) } } } : r < 0.8 ? { kind: { case: "credit", value: { credit: below(next, 1000) } } } : { kind: { case: "ackBatch", value: { leaseTokens: tokens(next) } } }));
      if (sameRequest(input)) decoded++;
    }
    expect(decoded).toBeGreaterThan(2000);
    expect(decoded).toBeLessThan(4000);
  });

  it("leaves to fromBinary what the one pass does not read: another kind after the batch, an unknown field, a token that is not ASCII", () => {
    const batch = encodeAckBatch(["a", "b"]);
    const unknown = new BinaryWriter().tag(7, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string("a").tag(9, WireType.Varint).uint32(1).join().finish();
    for (const input of [Buffer.concat([batch, encodeAckBatch(["c"])]), Buffer.concat([batch, toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind: { case: "credit", value: { credit: 3 } } }))]), unknown, encodeAckBatch(["schlüssel"])]) {
      expect(readAckBatch(input)).toBeUndefined();
      sameRequest(input);
    }
  });
});

describe("encodeAckBatch", () => {
  it("writes toBinary's bytes for generated batches: empty, empty tokens, multi-byte lengths, any UTF-16", () => {
    const next = random(35);
    const batches = [[], [""], ["x".repeat(200)], Array.from({ length: 2000 }, (_, i) => `r.${i}.abcdefghij.owner`), ["\ud800", "a\udc00b"]];
    for (let n = 0; n < 500; n++) batches.push(Array.from({ length: below(next, 40) }, () => text(next, 60)));
    for (const leaseTokens of batches) {
      const expected = toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind: { case: "ackBatch", value: { leaseTokens } } }));
      expect(encodeAckBatch(leaseTokens).toString("hex")).toBe(Buffer.from(expected).toString("hex"));
    }
  });
});
