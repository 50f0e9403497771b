/** The hand-written wire form of deliveries decodes to what protobuf-es would have sent. */
import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type LeaseResponse, LeaseResponseSchema } from "../../src/gen/switchyard/v1/queue_pb.js";
import { encodeDeliveries, encodeDeliveryMessages } from "../../src/grpc/delivery-wire.js";
import type { Delivery } from "../../src/queue/lease-stream.js";

const deliveries: Delivery[] = [
  {
    token: "r.1.k2x9q0ab00.e3RodW1ibmFpbHN9",
    fence: 1,
    deliveryCount: 1,
    queue: "{thumbnails}",
    item: { id: "abc1", payload: new Uint8Array([0, 1, 2, 255]), headers: { traceparent: "00-ab-cd-01", "ünï": "cödé ✓" }, enqueueTimeMs: 1_764_470_000_123 },
    lastError: "",
  },
  // A redelivery carrying the reason its last delivery failed (multi-byte characters too).
  { token: "r.9.k2x9q0ab00.e3RodW1ibmFpbHN9", fence: 9, deliveryCount: 2, queue: "{thumbnails}", item: { id: "abc2", payload: new Uint8Array([1]), headers: {}, enqueueTimeMs: 0 }, lastError: "timeout: renderer 😀 gave up" },
  // A raw item: no id, headers or enqueue time; a fence past 2^32 and a long payload (multi-byte lengths).
  { token: "s.4294967301.e30", fence: 2 ** 32 + 5, deliveryCount: 300, queue: "{}", item: { id: "", payload: new Uint8Array(300).fill(7), headers: {}, enqueueTimeMs: 0 }, lastError: "" },
  // An enqueue time on a whole second (nanos 0) and an empty payload.
  { token: "s.3.e30", fence: 3, deliveryCount: 1, queue: "cache.warmups", item: { id: "x", payload: new Uint8Array(0), headers: {}, enqueueTimeMs: 1_764_470_000_000 }, lastError: "" },
];

function byProtobufEs(batch: Delivery[]) {
  return create(LeaseResponseSchema, {
    kind: {
      case: "deliveries",
      value: {
        deliveries: batch.map((d) => ({
          leaseToken: d.token,
          fence: BigInt(d.fence),
          id: d.item.id,
          payload: d.item.payload,
          headers: d.item.headers,
          enqueueTime: d.item.enqueueTimeMs ? timestampFromMs(d.item.enqueueTimeMs) : undefined,
          deliveryCount: d.deliveryCount,
          queue: d.queue,
          lastError: d.lastError,
        })),
      },
    },
  });
}

describe("encodeDeliveries", () => {
  it("decodes to the message protobuf-es encodes, byte for byte", () => {
    const expected = byProtobufEs(deliveries);
    const bytes = encodeDeliveries(deliveries).bytes;
    expect(fromBinary(LeaseResponseSchema, new Uint8Array(bytes))).toEqual(expected);
    expect(Buffer.from(bytes).equals(Buffer.from(toBinary(LeaseResponseSchema, expected)))).toBe(true);
  });

  it("encodes an empty batch", () => {
    expect(fromBinary(LeaseResponseSchema, new Uint8Array(encodeDeliveries([]).bytes))).toEqual(byProtobufEs([]));
  });
});

/** The deliveries a LeaseResponse carries. */
function batchOf(message: LeaseResponse) {
  if (message.kind.case !== "deliveries") throw new Error(`expected deliveries, got ${message.kind.case}`);
  return message.kind.value.deliveries;
}

describe("encodeDeliveryMessages", () => {
  /** Each delivery's message alone, as protobuf-es encodes it. */
  const alone = deliveries.map((d) => toBinary(LeaseResponseSchema, byProtobufEs([d])).length);
  const none = () => expect.unreachable("no delivery is too large here");

  it("splits a batch into messages within the limit, in order, each as protobuf-es encodes it", () => {
    // Every limit from the largest delivery alone up to the whole batch.
    const whole = encodeDeliveries(deliveries).bytes.length;
    for (let max = Math.max(...alone); max <= whole; max++) {
      const messages = encodeDeliveryMessages(deliveries, max, none);
      const parts = messages.map((m) => batchOf(fromBinary(LeaseResponseSchema, new Uint8Array(m.bytes))));
      expect(parts.flat()).toEqual(batchOf(byProtobufEs(deliveries)));
      for (const m of messages) expect(m.bytes.length).toBeLessThanOrEqual(max);
      // Filled in turn: each message and the next one's first delivery would not have fit in one.
      let from = 0;
      for (let i = 0; i + 1 < parts.length; i++) {
        from += parts[i].length;
        const first = parts[i].length;
        expect(encodeDeliveries(deliveries.slice(from - first, from + 1)).bytes.length).toBeGreaterThan(max);
      }
    }
    expect(encodeDeliveryMessages(deliveries, whole, none)).toHaveLength(1);
  });

  it("leaves out a delivery whose message alone is over the limit, telling its exact size, and sends the others", () => {
    const big = 2; // the 300-byte payload: the largest
    expect(Math.max(...alone)).toBe(alone[big]);
    const tooLarge: [Delivery, number][] = [];
    const max = alone[big] - 1;
    const messages = encodeDeliveryMessages(deliveries, max, (d, bytes) => tooLarge.push([d, bytes]));
    expect(tooLarge).toEqual([[deliveries[big], alone[big]]]);
    const sent = messages.flatMap((m) => batchOf(fromBinary(LeaseResponseSchema, new Uint8Array(m.bytes))));
    expect(sent).toEqual(batchOf(byProtobufEs(deliveries.filter((_, i) => i !== big))));
    for (const m of messages) expect(m.bytes.length).toBeLessThanOrEqual(max);
  });
});
