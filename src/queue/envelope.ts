/**
 * How items are stored in a queue list. Switchyard wraps what it enqueues in an
 * envelope (id, headers, enqueue time); any other value is a raw payload, as a
 * plain `LPUSH` from any Redis client writes it (SPEC Q1).
 */
import { randomBytes } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { EnvelopeSchema } from "../gen/switchyard/v1/queue_pb.js";
import { lenFieldSize, ProtoWriter, varintFieldSize } from "../wire/proto-writer.js";

const MAGIC = Buffer.from("SYE1");

/** An item as a worker sees it. */
export interface Item {
  /** "" for a raw item. */
  id: string;
  payload: Uint8Array;
  headers: Record<string, string>;
  /** 0 for a raw item. */
  enqueueTimeMs: number;
}

const idPrefix = randomBytes(6).toString("base64url");
let idCounter = 0;

/** A new item id, unique across instances: a random per-process prefix and a counter. */
export function newItemId(): string {
  return `${idPrefix}${(++idCounter).toString(36)}`;
}


/**
 * The stored form of an item: "SYE1" and the protobuf encoding of an
 * Envelope, written by hand because protobuf-es' generic writer cost several
 * times more per item on the enqueue path (bench/diagnostics/envelope-encoding.mjs).
 * The bytes are exactly protobuf-es' (test/unit/envelope.test.ts checks it):
 * fields in number order, empty scalars left out, each header an entry with
 * key (1) and value (2) always written, in `Object.keys` order.
 */
export function encodeItem(id: string, payload: Uint8Array, headers: Record<string, string>, enqueueTimeMs: number): Buffer {
  if (!Number.isSafeInteger(enqueueTimeMs) || enqueueTimeMs < 0) throw new RangeError(`enqueue time ${enqueueTimeMs} is not a time in ms`);
  const idLength = Buffer.byteLength(id);
  const keys = Object.keys(headers);
  // Per header: key bytes, value bytes, entry bytes.
  const headerSizes: number[] = [];
  let size = MAGIC.length;
  if (idLength > 0) size += lenFieldSize(idLength);
  if (payload.byteLength > 0) size += lenFieldSize(payload.byteLength);
  for (const key of keys) {
    const keyLength = Buffer.byteLength(key);
    const valueLength = Buffer.byteLength(headers[key]);
    const entry = lenFieldSize(keyLength) + lenFieldSize(valueLength);
    headerSizes.push(keyLength, valueLength, entry);
    size += lenFieldSize(entry);
  }
  if (enqueueTimeMs > 0) size += varintFieldSize(enqueueTimeMs);

  const w = new ProtoWriter(Buffer.allocUnsafe(size));
  w.raw(MAGIC);
  if (idLength > 0) w.string(1, id, idLength);
  if (payload.byteLength > 0) w.bytes(2, payload);
  for (let i = 0; i < keys.length; i++) {
    w.len(3, headerSizes[3 * i + 2]); // a map entry: key 1, value 2
    w.string(1, keys[i], headerSizes[3 * i]);
    w.string(2, headers[keys[i]], headerSizes[3 * i + 1]);
  }
  if (enqueueTimeMs > 0) w.uint(4, enqueueTimeMs);
  return w.buf;
}

/** Reads a stored value: an envelope when it is one, otherwise a raw payload. */
export function decodeItem(value: Buffer): Item {
  if (value.length >= MAGIC.length && value.subarray(0, MAGIC.length).equals(MAGIC)) {
    try {
      const env = fromBinary(EnvelopeSchema, value.subarray(MAGIC.length));
      // Switchyard's envelopes always carry an id; without one, the magic bytes were a coincidence.
      if (env.id) return { id: env.id, payload: env.payload, headers: env.headers, enqueueTimeMs: Number(env.enqueueTimeMs) };
    } catch {
      // Not an envelope after all: a raw value that happens to start with the magic bytes.
    }
  }
  return { id: "", payload: value, headers: {}, enqueueTimeMs: 0 };
}
