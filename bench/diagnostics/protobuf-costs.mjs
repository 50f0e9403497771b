// protobuf-es costs per item on the Enqueue and Lease paths (request encode/decode, one ack message per item,
// a delivery batch).
//   node bench/diagnostics/protobuf-costs.mjs
import { create, toBinary, fromBinary } from "@bufbuild/protobuf";
import { EnqueueRequestSchema, EnqueueItemSchema, LeaseRequestSchema, LeaseResponseSchema, DeliverySchema } from "../../dist/gen/switchyard/v1/queue_pb.js";
import { performance } from "node:perf_hooks";
const p = Buffer.alloc(100, 120);
const K = 200;
const time = (label, fn) => { fn(); const t = performance.now(); for (let k = 0; k < K; k++) fn(); const us = (performance.now() - t) / K / 1000 * 1000; console.log(`${label}: ${us.toFixed(2)} µs per item`); };
let bytes;
time("client: create 1000 EnqueueItems + toBinary(EnqueueRequest)", () => {
  bytes = toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { queue: "{q}", items: Array.from({ length: 1000 }, () => create(EnqueueItemSchema, { payload: p })) }));
});
time("server: fromBinary(EnqueueRequest)", () => fromBinary(EnqueueRequestSchema, bytes));
// acks: one LeaseRequest per item (what the stream sends today)
const token = "r.12345.0123456789abcdef0123456789abcdef01234567.e3Fxb1";
let one;
time("client: one ack LeaseRequest (create + toBinary), per item", () => { for (let i = 0; i < 1000; i++) one = toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind: { case: "ack", value: { leaseToken: token } } })); });
time("server: fromBinary(ack LeaseRequest), per item", () => { for (let i = 0; i < 1000; i++) fromBinary(LeaseRequestSchema, one); });
let del;
time("server: 1000 Delivery messages create + toBinary(LeaseResponse)", () => {
  del = toBinary(LeaseResponseSchema, create(LeaseResponseSchema, { kind: { case: "deliveries", value: { deliveries: Array.from({ length: 1000 }, (_, i) => create(DeliverySchema, { leaseToken: token, fence: BigInt(i), id: "abcdefgh12", payload: p, headers: {}, deliveryCount: 1, queue: "{q}" })) } } }));
});
time("client: fromBinary(LeaseResponse with 1000 deliveries)", () => fromBinary(LeaseResponseSchema, del));
