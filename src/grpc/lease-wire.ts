/**
 * The Lease stream's two hot messages on the client's side, read and written
 * by hand: every delivery a worker takes arrives in a LeaseResponse, and every
 * ack leaves in a LeaseRequest's ack_batch. protobuf-es' fromBinary builds a
 * Delivery through its reflection at about 1 µs each, and create + toBinary
 * cost about 0.5 µs per acked token; these read and write the same messages
 * and bytes for a fraction of that. (The server writes deliveries by hand
 * too: delivery-wire.ts.)
 *
 *   LeaseResponse  2 deliveries: DeliveryBatch (other kinds: protobuf-es reads them)
 *   DeliveryBatch  1 deliveries: repeated Delivery
 *   Delivery       1 lease_token  2 fence  3 id  4 payload  5 headers (map entries: 1 key, 2 value)
 *                  6 enqueue_time: Timestamp  7 delivery_count  8 queue  9 last_error
 *   LeaseRequest   7 ack_batch: LeaseAckBatch { 1 lease_tokens: repeated string }
 *
 * decodeLeaseResponse reads as fromBinary does (see proto-reader.ts), except
 * that unknown fields are skipped rather than kept; a response that is not
 * deliveries alone goes to fromBinary whole. encodeAckBatch writes toBinary's
 * bytes. test/grpc/lease-wire.test.ts holds both to protobuf-es.
 */
import { fromBinary } from "@bufbuild/protobuf";
import { type Delivery, type DeliveryBatch, type LeaseRequest, LeaseRequestSchema, type LeaseResponse, LeaseResponseSchema } from "../gen/switchyard/v1/queue_pb.js";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { latin1, RECURSION_LIMIT, Reader, readAsciiEntry, readHeader, readTimestamp, shortVarint } from "../wire/proto-reader.js";
import { lenFieldSize, ProtoWriter } from "../wire/proto-writer.js";

/** The one-byte tags (field << 3 | wire type LEN) of a LeaseResponse's deliveries, a batch's delivery, and an ack_batch. */
const DELIVERIES_TAG = (2 << 3) | 2;
const DELIVERY_TAG = (1 << 3) | 2;
/** A delivery without a payload field has this one (fromBinary's is a new empty array each time; neither can be written to). */
const EMPTY = new Uint8Array(0);

/**
 * Reads one Delivery; `depth` is the depth of the batch holding it (the
 * response is at 1). The field number alone decides how a field is read, as
 * in fromBinary (its wire type is not checked).
 */
function readDelivery(r: Reader, depth: number): Delivery {
  const d: Delivery = {
    $typeName: "switchyard.v1.Delivery",
    leaseToken: "", fence: 0n, id: "", payload: EMPTY, headers: {},
    enqueueTime: undefined, deliveryCount: 0, queue: "", lastError: "",
  };
  const end = r.messageEnd();
  while (r.pos < end) {
    // The server writes one-byte tags (fields 1-15); tag() reads any other, and throws where fromBinary does.
    let no: number;
    let wireType: number;
    const tag = r.shortTag();
    if (tag >= 8 && (tag & 7) <= 5) {
      no = tag >>> 3;
      wireType = tag & 7;
    } else {
      if (tag >= 0) r.pos--;
      [no, wireType] = r.tag();
    }
    switch (no) {
      case 1:
        d.leaseToken = r.strictString();
        break;
      case 2:
        d.fence = r.uint64() as bigint;
        break;
      case 3:
        d.id = r.strictString();
        break;
      case 4:
        d.payload = r.bytes();
        break;
      case 5:
        readHeader(r, d.headers, depth + 1);
        break;
      case 6:
        d.enqueueTime = readTimestamp(r, d.enqueueTime, depth + 1);
        break;
      case 7:
        d.deliveryCount = r.uint32();
        break;
      case 8:
        d.queue = r.strictString();
        break;
      case 9:
        d.lastError = r.strictString();
        break;
      default:
        r.skip(wireType, no, RECURSION_LIMIT - depth - 1);
    }
  }
  return d;
}

/** Reads a DeliveryBatch's deliveries onto `into` (a repeated batch field merges). */
function readBatch(r: Reader, into: Delivery[]): void {
  const depth = 2;
  const end = r.messageEnd();
  while (r.pos < end) {
    if (r.skipTag(DELIVERY_TAG)) {
      into.push(readDelivery(r, depth));
      continue;
    }
    const [no, wireType] = r.tag();
    if (no === 1) into.push(readDelivery(r, depth));
    else r.skip(wireType, no, RECURSION_LIMIT - depth);
  }
}

/** Unknown fields are skipped here, in what protobuf-es reads too. */
const SKIP_UNKNOWN = { readUnknownFields: false };

/**
 * A Delivery's fields as the server writes them (delivery-wire.ts): one-byte
 * tags in increasing field order, each with its own wire type, each once but
 * the headers' entries (field 5).
 */
const DELIVERY_WIRE = [-1, 2, 0, 2, 2, 2, 2, 0, 2, 2];
const HEADERS = 5;

/**
 * The deliveries of a response as the server writes them, read in one pass
 * with none of BinaryReader's calls: a paced delivery is read by a worker that
 * slept, where each function it runs for the first time in a while is dear
 * (about 15 µs against 35 for readBatch, measured after 10 ms asleep). Only
 * what it is sure to read as fromBinary does is read: ASCII strings and
 * headers, varints of up to 7 bytes (under 2^49), a non-negative timestamp,
 * fields in order and once each (but headers), nothing unknown. Anything else is left to
 * the general reader (undefined), which reads it from the start.
 */
export function readServerDeliveries(b: Uint8Array): LeaseResponse | undefined {
  if (b[0] !== DELIVERIES_TAG) return undefined;
  const n = b.byteLength; // read once: Buffer's byteLength getter is dear in a loop
  const at = { pos: 1 };
  const batch = shortVarint(b, at);
  if (batch < 0 || at.pos + batch !== n) return undefined;
  let text: string | undefined;
  const deliveries: Delivery[] = [];
  while (at.pos < n) {
    if (b[at.pos++] !== DELIVERY_TAG) return undefined;
    const length = shortVarint(b, at);
    const end = at.pos + length;
    if (length < 0 || end > n) return undefined;
    const d: Delivery = {
      $typeName: "switchyard.v1.Delivery",
      leaseToken: "", fence: 0n, id: "", payload: EMPTY, headers: {},
      enqueueTime: undefined, deliveryCount: 0, queue: "", lastError: "",
    };
    for (let last = 0; at.pos < end; ) {
      const tag = b[at.pos++];
      const no = tag >>> 3;
      if (no < last || (no === last && no !== HEADERS) || no >= DELIVERY_WIRE.length || (tag & 7) !== DELIVERY_WIRE[no]) return undefined;
      last = no;
      const value = shortVarint(b, at);
      if (value < 0) return undefined;
      if (no === 2) d.fence = BigInt(value);
      else if (no === 7) {
        if (value >= 2 ** 32) return undefined;
        d.deliveryCount = value;
      } else {
        const start = at.pos;
        at.pos += value;
        if (at.pos > end) return undefined;
        if (no === 4) d.payload = b.subarray(start, at.pos);
        else if (no === HEADERS) {
          if (!readAsciiEntry(b, start, at.pos, d.headers)) return undefined;
        } else if (no === 6) {
          const time = readServerTimestamp(b, start, at.pos);
          if (!time) return undefined;
          d.enqueueTime = time;
        } else {
          for (let i = start; i < at.pos; i++) if (b[i] > 0x7f) return undefined;
          text ??= latin1(b);
          const s = text.substring(start, at.pos);
          if (no === 1) d.leaseToken = s;
          else if (no === 3) d.id = s;
          else if (no === 8) d.queue = s;
          else d.lastError = s;
        }
      }
    }
    if (at.pos !== end) return undefined;
    deliveries.push(d);
  }
  return { $typeName: "switchyard.v1.LeaseResponse", kind: { case: "deliveries", value: { $typeName: "switchyard.v1.DeliveryBatch", deliveries } } };
}

/** A Timestamp in b[from, to) as the server writes it (seconds, then nanos, each once, neither negative); undefined otherwise. */
function readServerTimestamp(b: Uint8Array, from: number, to: number): Timestamp | undefined {
  const at = { pos: from };
  let seconds = 0;
  let nanos = 0;
  if (at.pos < to && b[at.pos] === 0x08) {
    at.pos++;
    seconds = shortVarint(b, at);
  }
  if (seconds >= 0 && at.pos < to && b[at.pos] === 0x10) {
    at.pos++;
    nanos = shortVarint(b, at);
  }
  if (seconds < 0 || nanos < 0 || nanos >= 2 ** 31 || at.pos !== to) return undefined;
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos };
}

/** fromBinary(LeaseResponseSchema, bytes, SKIP_UNKNOWN), with a delivery batch read by hand. */
export function decodeLeaseResponse(bytes: Uint8Array): LeaseResponse {
  return readServerDeliveries(bytes) ?? readResponse(bytes);
}

/** decodeLeaseResponse of any bytes: deliveries through BinaryReader, other kinds through protobuf-es. */
function readResponse(bytes: Uint8Array): LeaseResponse {
  const r = new Reader(bytes);
  let batch: DeliveryBatch | undefined;
  while (r.pos < bytes.byteLength) {
    // Anything but deliveries (opened, a heartbeat, a settle result, a drain; or deliveries then another kind,
    // where the last wins): rare, and protobuf-es reads it.
    if (!r.skipTag(DELIVERIES_TAG)) return fromBinary(LeaseResponseSchema, bytes, SKIP_UNKNOWN);
    batch ??= { $typeName: "switchyard.v1.DeliveryBatch", deliveries: [] };
    readBatch(r, batch.deliveries);
  }
  if (!batch) return fromBinary(LeaseResponseSchema, bytes, SKIP_UNKNOWN);
  return { $typeName: "switchyard.v1.LeaseResponse", kind: { case: "deliveries", value: batch } };
}

/** A LeaseRequest's ack_batch (field 7, LEN) and a LeaseAckBatch's tokens (field 1, LEN). */
const ACK_BATCH_TAG = (7 << 3) | 2;
const TOKEN_TAG = (1 << 3) | 2;

/**
 * fromBinary(LeaseRequestSchema, bytes). An ack_batch as encodeAckBatch writes
 * it (ASCII tokens, nothing else; every settle of a worker of this client) is
 * read in one pass, its tokens cut from the message decoded once as Latin-1,
 * where fromBinary's reflection decodes each on its own; anything else is
 * fromBinary's.
 */
export function decodeLeaseRequest(bytes: Uint8Array): LeaseRequest {
  return readAckBatch(bytes) ?? fromBinary(LeaseRequestSchema, bytes);
}

/** An ack_batch as encodeAckBatch writes ASCII tokens (see decodeLeaseRequest); undefined for anything else. */
export function readAckBatch(b: Uint8Array): LeaseRequest | undefined {
  if (b[0] !== ACK_BATCH_TAG) return undefined;
  const n = b.byteLength; // read once: Buffer's byteLength getter is dear in a loop
  const at = { pos: 1 };
  const batch = shortVarint(b, at);
  if (batch < 0 || at.pos + batch !== n) return undefined;
  const leaseTokens: string[] = [];
  let text: string | undefined;
  while (at.pos < n) {
    if (b[at.pos++] !== TOKEN_TAG) return undefined;
    const length = shortVarint(b, at);
    const start = at.pos;
    at.pos += length;
    if (length < 0 || at.pos > n) return undefined;
    for (let i = start; i < at.pos; i++) if (b[i] > 0x7f) return undefined;
    text ??= latin1(b);
    leaseTokens.push(text.substring(start, at.pos));
  }
  return { $typeName: "switchyard.v1.LeaseRequest", kind: { case: "ackBatch", value: { $typeName: "switchyard.v1.LeaseAckBatch", leaseTokens } } };
}

/** toBinary(LeaseRequestSchema, { kind: { case: "ackBatch", value: { leaseTokens } } }), by hand. */
export function encodeAckBatch(leaseTokens: readonly string[]): Buffer {
  const sizes = leaseTokens.map((t) => Buffer.byteLength(t));
  let batch = 0;
  for (const size of sizes) batch += lenFieldSize(size);
  const w = new ProtoWriter(Buffer.allocUnsafe(lenFieldSize(batch)));
  w.len(7, batch);
  for (let i = 0; i < leaseTokens.length; i++) w.string(1, leaseTokens[i], sizes[i]);
  return w.buf;
}
