/**
 * The wire forms of Enqueue, read and written by hand: every enqueued item
 * passes through them on the client and on the server, and protobuf-es'
 * generic create + toBinary and fromBinary build a message object (and a
 * headers map) per item on each side (issue #4, bench row 6).
 *
 *   EnqueueRequest   1 queue  2 items: repeated EnqueueItem  3 ttl: Duration
 *                    4 min_replicas  5 replica_timeout: Duration
 *   EnqueueItem      1 payload  2 headers (map entries: 1 key, 2 value)
 *                    3 not_before: Timestamp  4 delay: Duration  5 idempotency_key
 *   Duration, Timestamp  1 seconds (int64)  2 nanos (int32)
 *   EnqueueResponse  1 ids: repeated string  2 duplicates: repeated uint32 (packed)
 *
 * The encoders write exactly protobuf-es' bytes: fields in number order,
 * fields at their default left out, each header an entry with its key and
 * value, in Object.keys order. The readers accept exactly what fromBinary
 * accepts and give the same fields, except that unknown fields are skipped
 * rather than kept: readEnqueueRequest leaves the items packed in the
 * request's bytes (what the server's Enqueue takes), decodeEnqueueRequest
 * makes the protobuf-es message of them. To read alike they use protobuf-es'
 * own BinaryReader the way fromBinary does: the field number alone decides
 * how a field is read (its wire type is not checked), the last of a repeated
 * scalar wins, a repeated message field merges, strings must be valid UTF-8,
 * and a malformed input throws. test/grpc/enqueue-wire.test.ts compares them
 * with protobuf-es on generated, mangled and truncated input.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import {
  type EnqueueRequest,
  EnqueueRequestSchema,
  type EnqueueResponse,
  type EnqueueStreamResponse,
  EnqueueStreamResponseSchema,
  EnqueueItemSchema,
} from "../gen/switchyard/v1/queue_pb.js";
import type { ItemIds } from "../queue/item-ids.js";
import { PackedItems, type PackedExtras } from "../queue/new-items.js";
import { asciiField, RECURSION_LIMIT, Reader, readAsciiEntry, readDuration, readHeader, readTimestamp, shortVarint } from "../wire/proto-reader.js";
import { lenFieldSize, measureStringMap, ProtoWriter, varintFieldSize, varintSize } from "../wire/proto-writer.js";

/** The one-byte tags of the fields every item has: (field << 3) | wire type LEN. */
const ITEM_TAG = (2 << 3) | 2;
const PAYLOAD_TAG = (1 << 3) | 2;
const ID_TAG = (1 << 3) | 2;
/** EnqueueStreamRequest's id (VARINT) and request (LEN), and EnqueueRequest's queue. */
const STREAM_REQUEST_ID_TAG = (1 << 3) | 0;
const STREAM_REQUEST_TAG = (2 << 3) | 2;
const QUEUE_TAG = (1 << 3) | 2;
/** An EnqueueItem's header entries (LEN). */
const HEADER_TAG = (2 << 3) | 2;
/** EnqueueStreamResponse's ids. */
const STREAM_ID_TAG = (4 << 3) | 2;

/** Reads an item into `items`: its last payload, its headers in the order given, its other fields as fromBinary reads them. */
function readItem(r: Reader, items: PackedItems, depth: number): void {
  let start = -1;
  let end = 0;
  let headers: Record<string, string> | undefined;
  let extras: PackedExtras | undefined;
  const stop = r.messageEnd();
  while (r.pos < stop) {
    if (r.skipTag(PAYLOAD_TAG)) {
      start = r.bytesStart();
      end = r.pos;
      continue;
    }
    const [no, wireType] = r.tag();
    switch (no) {
      case 1:
        start = r.bytesStart();
        end = r.pos;
        break;
      case 2:
        readHeader(r, (headers ??= {}), depth);
        break;
      case 3:
        extras ??= { idempotencyKey: "" };
        extras.notBefore = readTimestamp(r, extras.notBefore, depth + 1);
        break;
      case 4:
        extras ??= { idempotencyKey: "" };
        extras.delay = readDuration(r, extras.delay, depth + 1);
        break;
      case 5:
        extras ??= { idempotencyKey: "" };
        extras.idempotencyKey = r.string(true);
        break;
      default:
        r.skip(wireType, no, RECURSION_LIMIT - depth - 1);
    }
  }
  items.add(start, end, headers, extras);
}

/** An Enqueue request as the server reads it: its items packed, left in the request's bytes. */
export interface EnqueueCall {
  queue: string;
  items: PackedItems;
  ttl?: Duration;
  minReplicas: number;
  replicaTimeout?: Duration;
}

/**
 * Reads an EnqueueRequest as fromBinary would (the same fields, or the same
 * kind of error), but leaves the items in `bytes`: no object, view or headers
 * map per item unless it has headers.
 */
export function readEnqueueRequest(bytes: Uint8Array): EnqueueCall {
  const request: EnqueueCall = { queue: "", items: new PackedItems(bytes), minReplicas: 0 };
  readRequestFields(new Reader(bytes), request, bytes.byteLength, 1);
  return request;
}

/**
 * Reads an EnqueueRequest's fields up to `end` into `request` (a second
 * request field merges into the first, as fromBinary merges), on the reader
 * of the whole input, as fromBinary reads a message field. `depth`: how deep
 * the request is (1 on its own, 2 in an EnqueueStreamRequest).
 */
function readRequestFields(r: Reader, request: EnqueueCall, end: number, depth: number): void {
  while (r.pos < end) {
    if (r.skipTag(ITEM_TAG)) {
      readItem(r, request.items, depth);
      continue;
    }
    const [no, wireType] = r.tag();
    switch (no) {
      case 1:
        request.queue = r.string(true);
        break;
      case 2:
        readItem(r, request.items, depth);
        break;
      case 3:
        request.ttl = readDuration(r, request.ttl, depth);
        break;
      case 4:
        request.minReplicas = r.uint32();
        break;
      case 5:
        request.replicaTimeout = readDuration(r, request.replicaTimeout, depth);
        break;
      default:
        r.skip(wireType, no, RECURSION_LIMIT - depth);
    }
  }
}

/**
 * fromBinary(EnqueueRequestSchema, bytes), by hand: the same message, or the
 * same kind of error. Payloads are views of `bytes`, as fromBinary's are.
 */
export function decodeEnqueueRequest(bytes: Uint8Array): EnqueueRequest {
  const { queue, items, ttl, minReplicas, replicaTimeout } = readEnqueueRequest(bytes);
  const request: EnqueueRequest = { $typeName: "switchyard.v1.EnqueueRequest", queue, items: [], minReplicas };
  if (ttl) request.ttl = ttl;
  if (replicaTimeout) request.replicaTimeout = replicaTimeout;
  for (let i = 0; i < items.count; i++) {
    const item: EnqueueRequest["items"][number] = {
      $typeName: "switchyard.v1.EnqueueItem", payload: items.payload(i), headers: items.givenHeaders(i) ?? {}, idempotencyKey: "",
    };
    const extras = items.givenExtras(i);
    if (extras?.notBefore) item.notBefore = extras.notBefore;
    if (extras?.delay) item.delay = extras.delay;
    if (extras) item.idempotencyKey = extras.idempotencyKey;
    request.items.push(item);
  }
  return request;
}

/** The bytes of a packed repeated uint32 field (nothing when empty), as protobuf-es writes them. */
function packedUints(field: number, values: readonly number[]): Buffer {
  if (values.length === 0) return Buffer.alloc(0);
  let body = 0;
  for (const v of values) body += varintSize(v);
  const w = new ProtoWriter(Buffer.allocUnsafe(lenFieldSize(body)));
  w.len(field, body);
  for (const v of values) w.varint(v);
  return w.buf;
}

/** toBinary(EnqueueResponseSchema, response), by hand: the same bytes. */
export function encodeEnqueueResponse({ ids, duplicates = [] }: { ids: readonly string[]; duplicates?: readonly number[] }): Buffer {
  const sizes = new Array<number>(ids.length);
  let size = 0;
  for (let i = 0; i < ids.length; i++) {
    sizes[i] = Buffer.byteLength(ids[i]);
    size += lenFieldSize(sizes[i]);
  }
  const w = new ProtoWriter(Buffer.allocUnsafe(size));
  for (let i = 0; i < ids.length; i++) w.string(1, ids[i], sizes[i]);
  return duplicates.length > 0 ? Buffer.concat([w.buf, packedUints(2, duplicates)]) : w.buf;
}

/** The bytes encodeEnqueueResponse writes for { ids: ids.toArray() }, written without the strings. */
export function encodeEnqueueResponseIds(ids: ItemIds): Buffer {
  return idsMessage(0, 1, ids);
}

/**
 * Reads a repeated uint32 field into `into`, packed (wire type LEN) or not, as
 * fromBinary reads one.
 */
function readUints(r: Reader, wireType: number, into: number[]): void {
  if (wireType !== 2) {
    into.push(r.uint32());
    return;
  }
  const end = r.messageEnd();
  while (r.pos < end) into.push(r.uint32());
}

/**
 * A message of a uint32 `id` in field 1 (left out when 0: EnqueueResponse has
 * none) and `ids` as repeated string field `idsField`, written without the strings.
 */
function idsMessage(id: number, idsField: number, ids: ItemIds): Buffer {
  let size = id ? varintFieldSize(id) : 0;
  for (let i = 0; i < ids.count; i++) size += lenFieldSize(ids.size(i));
  const w = new ProtoWriter(Buffer.allocUnsafe(size));
  if (id) w.uint(1, id);
  for (let i = 0; i < ids.count; i++) {
    w.len(idsField, ids.size(i));
    ids.write(i, w);
  }
  return w.buf;
}

/** fromBinary(EnqueueResponseSchema, bytes), by hand: the same message, or the same kind of error. */
export function decodeEnqueueResponse(bytes: Uint8Array): EnqueueResponse {
  const r = new Reader(bytes);
  const ids: string[] = [];
  const duplicates: number[] = [];
  while (r.pos < bytes.byteLength) {
    if (r.skipTag(ID_TAG)) {
      ids.push(r.strictString());
      continue;
    }
    const [no, wireType] = r.tag();
    if (no === 1) ids.push(r.strictString());
    else if (no === 2) readUints(r, wireType, duplicates);
    else r.skip(wireType, no, RECURSION_LIMIT - 1);
  }
  return { $typeName: "switchyard.v1.EnqueueResponse", ids, duplicates };
}

/** An item's fields to write; it needs no $typeName. */
export interface EnqueueItemFields {
  payload: Uint8Array;
  headers?: Record<string, string>;
  notBefore?: Timestamp;
  delay?: Duration;
  idempotencyKey?: string;
}

/** The fields of an EnqueueRequest to write; items need no $typeName. */
export interface EnqueueRequestFields {
  queue: string;
  items: readonly EnqueueItemFields[];
  ttl?: Duration;
  minReplicas?: number;
  replicaTimeout?: Duration;
}

/** An EnqueueRequest measured for writing (measureRequest): its size, and the parts' sizes and bytes found on the way. */
interface MeasuredRequest {
  size: number;
  queueSize: number;
  itemSizes: number[];
  /** Key bytes, value bytes and entry bytes of every header of every item, in writing order. */
  headerSizes: number[];
  /** Fields 3–5 of the few items that have them, written by protobuf-es (they follow payload and headers). */
  extras: (Uint8Array | undefined)[];
  /** The fields after the items, rare and small: protobuf-es writes them, range checks included. */
  tail?: Uint8Array;
}

function measureRequest(request: EnqueueRequestFields): MeasuredRequest {
  const { queue, items, ttl, minReplicas, replicaTimeout } = request;
  const tail = ttl || minReplicas || replicaTimeout ? toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { ttl, minReplicas, replicaTimeout })) : undefined;
  const queueSize = Buffer.byteLength(queue);
  const itemSizes = new Array<number>(items.length);
  const headerSizes: number[] = [];
  let size = (queueSize > 0 ? lenFieldSize(queueSize) : 0) + (tail?.byteLength ?? 0);
  const extras = new Array<Uint8Array | undefined>(items.length);
  for (let i = 0; i < items.length; i++) {
    const { payload, headers, notBefore, delay, idempotencyKey } = items[i];
    let itemSize = payload.byteLength > 0 ? lenFieldSize(payload.byteLength) : 0;
    if (headers) itemSize += measureStringMap(headers, headerSizes);
    if (notBefore || delay || idempotencyKey) {
      extras[i] = toBinary(EnqueueItemSchema, create(EnqueueItemSchema, { notBefore, delay, idempotencyKey }));
      itemSize += extras[i]!.byteLength;
    }
    itemSizes[i] = itemSize;
    size += lenFieldSize(itemSize);
  }
  return { size, queueSize, itemSizes, headerSizes, extras, tail };
}

/** Writes `request` as measureRequest measured it (`m`) at `w`'s position. */
function writeRequest(w: ProtoWriter, request: EnqueueRequestFields, m: MeasuredRequest): void {
  const { items } = request;
  if (m.queueSize > 0) w.string(1, request.queue, m.queueSize);
  let h = 0;
  for (let i = 0; i < items.length; i++) {
    const { payload, headers } = items[i];
    w.len(2, m.itemSizes[i]);
    if (payload.byteLength > 0) w.bytes(1, payload);
    if (headers) h = w.stringMap(2, headers, m.headerSizes, h);
    if (m.extras[i]) w.raw(m.extras[i]!);
  }
  if (m.tail) w.raw(m.tail);
}

/** toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, request)), by hand: the same bytes. */
export function encodeEnqueueRequest(request: EnqueueRequestFields): Buffer {
  const m = measureRequest(request);
  const w = new ProtoWriter(Buffer.allocUnsafe(m.size));
  writeRequest(w, request, m);
  return w.buf;
}

/*
 * EnqueueStream's messages (the request wraps an EnqueueRequest):
 *
 *   EnqueueStreamRequest   1 id (uint32)  2 request: EnqueueRequest
 *   EnqueueStreamResponse  1 id (uint32)  2 code (int32)  3 message  4 ids: repeated string  5 duplicates  6 reason
 */

/** An EnqueueStream request as the server reads it: the request's items packed, as readEnqueueRequest leaves them. */
export interface EnqueueStreamCall {
  id: number;
  request?: EnqueueCall;
}

/**
 * Reads an EnqueueStreamRequest as fromBinary would (the same fields, or the
 * same kind of error), its request as readEnqueueRequest does: items packed
 * in `bytes`. A request field given more than once merges, as fromBinary does.
 */
export function readEnqueueStreamRequest(bytes: Uint8Array): EnqueueStreamCall {
  return readClientStreamRequest(bytes) ?? readStreamRequest(bytes);
}

/**
 * The EnqueueStreamRequest of a request with items of a payload and headers
 * (and nothing else), as the client writes it (encodeEnqueueStreamRequest), read in
 * one pass with none of BinaryReader's calls: a paced Enqueue is read by a
 * server that slept, where each function it runs for the first time in a while
 * is dear. Only what it is sure to read as fromBinary does is read: an ASCII
 * queue name, items of a payload and ASCII headers, varints of up to 7 bytes,
 * fields in order and once each (but headers); anything else is left to the
 * general reader (undefined), which reads it from the start.
 */
export function readClientStreamRequest(b: Uint8Array): EnqueueStreamCall | undefined {
  // The length read once: Buffer's byteLength getter, read on every turn of the loop below, cost a
  // request of 1,000 items about a third more than BinaryReader did.
  const n = b.byteLength;
  const at = { pos: 0 };
  const call: EnqueueStreamCall = { id: 0 };
  if (b[0] === STREAM_REQUEST_ID_TAG) {
    at.pos++;
    call.id = shortVarint(b, at);
    if (call.id < 0 || call.id > 0xffffffff) return undefined;
  }
  if (at.pos === n) return call;
  if (b[at.pos++] !== STREAM_REQUEST_TAG) return undefined;
  const size = shortVarint(b, at);
  if (size < 0 || at.pos + size !== n) return undefined;
  const request: EnqueueCall = { queue: "", items: new PackedItems(b), minReplicas: 0 };
  call.request = request;
  if (b[at.pos] === QUEUE_TAG) {
    at.pos++;
    const queue = asciiField(b, at, n);
    if (queue === undefined) return undefined;
    request.queue = queue;
  }
  while (at.pos < n) {
    if (b[at.pos++] !== ITEM_TAG) return undefined;
    const length = shortVarint(b, at);
    const end = at.pos + length;
    if (length < 0 || end > n) return undefined;
    let start = -1;
    let stop = 0;
    if (at.pos < end && b[at.pos] === PAYLOAD_TAG) {
      at.pos++;
      const payload = shortVarint(b, at);
      if (payload < 0 || at.pos + payload > end) return undefined;
      start = at.pos;
      stop = at.pos += payload;
    }
    let headers: Record<string, string> | undefined;
    while (at.pos < end) {
      if (b[at.pos++] !== HEADER_TAG) return undefined;
      const entry = shortVarint(b, at);
      if (entry < 0 || at.pos + entry > end || !readAsciiEntry(b, at.pos, at.pos + entry, (headers ??= {}))) return undefined;
      at.pos += entry;
    }
    request.items.add(start, stop, headers);
  }
  return call;
}

/** readEnqueueStreamRequest of any bytes, through BinaryReader. */
function readStreamRequest(bytes: Uint8Array): EnqueueStreamCall {
  const r = new Reader(bytes);
  const call: EnqueueStreamCall = { id: 0 };
  while (r.pos < bytes.byteLength) {
    const [no, wireType] = r.tag();
    if (no === 1) call.id = r.uint32();
    else if (no === 2) {
      call.request ??= { queue: "", items: new PackedItems(bytes), minReplicas: 0 };
      readRequestFields(r, call.request, r.messageEnd(), 2);
    } else r.skip(wireType, no, RECURSION_LIMIT - 1);
  }
  return call;
}

/** toBinary(EnqueueStreamRequestSchema, { id, request }), by hand: the same bytes (the request as encodeEnqueueRequest writes it). */
export function encodeEnqueueStreamRequest(id: number, request: EnqueueRequestFields): Buffer {
  const m = measureRequest(request);
  // One buffer for the id, the request's tag and length, and the request: no second one to join to it.
  const w = new ProtoWriter(Buffer.allocUnsafe((id ? varintFieldSize(id) : 0) + lenFieldSize(m.size)));
  if (id) w.uint(1, id);
  w.len(2, m.size);
  writeRequest(w, request, m);
  return w.buf;
}

/** toBinary(EnqueueStreamResponseSchema, { id, ids: ids.toArray() }), by hand and without the strings. */
export function encodeEnqueueStreamIds(id: number, ids: ItemIds): Buffer {
  return idsMessage(id, 4, ids);
}

/** toBinary(EnqueueStreamResponseSchema, { id, ids, duplicates }) of an enqueue whose items had options. */
export function encodeEnqueueStreamResult(id: number, ids: readonly string[], duplicates: readonly number[]): Buffer {
  return Buffer.from(toBinary(EnqueueStreamResponseSchema, { $typeName: "switchyard.v1.EnqueueStreamResponse", id, code: 0, message: "", ids: [...ids], duplicates: [...duplicates], reason: "" }));
}

/** fromBinary(EnqueueStreamResponseSchema, bytes), by hand: the same message, or the same kind of error. */
export function decodeEnqueueStreamResponse(bytes: Uint8Array): EnqueueStreamResponse {
  const r = new Reader(bytes);
  const response: EnqueueStreamResponse = { $typeName: "switchyard.v1.EnqueueStreamResponse", id: 0, code: 0, message: "", ids: [], duplicates: [], reason: "" };
  while (r.pos < bytes.byteLength) {
    if (r.skipTag(STREAM_ID_TAG)) {
      response.ids.push(r.strictString());
      continue;
    }
    const [no, wireType] = r.tag();
    switch (no) {
      case 1:
        response.id = r.uint32();
        break;
      case 2:
        response.code = r.int32();
        break;
      case 3:
        response.message = r.string(true);
        break;
      case 4:
        response.ids.push(r.strictString());
        break;
      case 5:
        readUints(r, wireType, response.duplicates);
        break;
      case 6:
        response.reason = r.string(true);
        break;
      default:
        r.skip(wireType, no, RECURSION_LIMIT - 1);
    }
  }
  return response;
}
