/**
 * How items are stored in a queue list. Switchyard wraps what it enqueues in an
 * envelope (id, headers, enqueue time); any other value is a raw payload, as a
 * plain `LPUSH` from any Redis client writes it (SPEC Q1).
 */
import { randomBytes } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { EnvelopeSchema } from "../gen/switchyard/v1/queue_pb.js";

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

/** The stored form of an item. */
export function encodeItem(id: string, payload: Uint8Array, headers: Record<string, string>, enqueueTimeMs: number): Buffer {
  const body = toBinary(EnvelopeSchema, create(EnvelopeSchema, { id, payload, headers, enqueueTimeMs: BigInt(enqueueTimeMs) }));
  return Buffer.concat([MAGIC, body]);
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
