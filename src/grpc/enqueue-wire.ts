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
import { RECURSION_LIMIT, Reader, readDuration, readHeader, readTimestamp } from "../wire/proto-reader.js";
import { lenFieldSize, measureStringMap, ProtoWriter, varintFieldSize, varintSize } from "../wire/proto-writer.js";

/** The one-byte tags of the fields every item has: (field << 3) | wire type LEN. */
const ITEM_TAG = (2 << 3) | 2;
const PAYLOAD_TAG = (1 << 3) | 2;
const ID_TAG = (1 << 3) | 2;
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

/** toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, request)), by hand: the same bytes. */
export function encodeEnqueueRequest(request: EnqueueRequestFields): Buffer {
  const { queue, items, ttl, minReplicas, replicaTimeout } = request;
  // The fields after the items are rare and small: protobuf-es writes them, range checks included.
  const tail = ttl || minReplicas || replicaTimeout ? toBinary(EnqueueRequestSchema, create(EnqueueRequestSchema, { ttl, minReplicas, replicaTimeout })) : undefined;
  const queueSize = Buffer.byteLength(queue);
  const itemSizes = new Array<number>(items.length);
  // Key bytes, value bytes and entry bytes of every header of every item, in writing order.
  const headerSizes: number[] = [];
  let size = (queueSize > 0 ? lenFieldSize(queueSize) : 0) + (tail?.byteLength ?? 0);
  // Fields 3–5 of the few items that have them: protobuf-es writes them (they follow payload and headers).
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
  const w = new ProtoWriter(Buffer.allocUnsafe(size));
  if (queueSize > 0) w.string(1, queue, queueSize);
  let h = 0;
  for (let i = 0; i < items.length; i++) {
    const { payload, headers } = items[i];
    w.len(2, itemSizes[i]);
    if (payload.byteLength > 0) w.bytes(1, payload);
    if (headers) h = w.stringMap(2, headers, headerSizes, h);
    if (extras[i]) w.raw(extras[i]!);
  }
  if (tail) w.raw(tail);
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
  const body = encodeEnqueueRequest(request);
  const w = new ProtoWriter(Buffer.allocUnsafe((id ? varintFieldSize(id) : 0) + lenFieldSize(body.byteLength) - body.byteLength));
  if (id) w.uint(1, id);
  w.len(2, body.byteLength);
  return Buffer.concat([w.buf, body]);
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
