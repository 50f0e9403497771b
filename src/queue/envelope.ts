/**
 * How items are stored in a queue list. Switchyard wraps what it enqueues in an
 * envelope (id, headers, enqueue time); any other value is a raw payload, as a
 * plain `LPUSH` from any Redis client writes it (SPEC Q1).
 */
import { create, fromBinary } from "@bufbuild/protobuf";
import { type Envelope, EnvelopeSchema, type ItemHistory, ItemHistorySchema } from "../gen/switchyard/v1/queue_pb.js";
import { SwitchyardError } from "../errors.js";
import { BulkStrings } from "../redis/bulk-strings.js";
import { RECURSION_LIMIT, Reader, readHeader } from "../wire/proto-reader.js";
import { lenFieldSize, measureStringMap, ProtoWriter, varintFieldSize } from "../wire/proto-writer.js";
import { ItemIds } from "./item-ids.js";
import { itemsOf, type NewItems } from "./new-items.js";

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

/** A new item id (see item-ids.ts). */
export function newItemId(): string {
  return ItemIds.next(1).get(0);
}

/** Where write() takes ids from: an enqueue's ItemIds, or one id given as text. */
interface Ids {
  /** Bytes of id i. */
  size(i: number): number;
  /** Writes id i's bytes. */
  write(i: number, w: ProtoWriter): void;
}

/**
 * Measures item i's stored form; pushes the key, value and entry bytes of
 * each of its headers onto `headerSizes` for write().
 */
function measure(idSize: number, items: NewItems, i: number, time: Buffer, headerSizes: number[]): number {
  let size = MAGIC.length;
  if (idSize > 0) size += lenFieldSize(idSize);
  const payloadSize = items.payloadSize(i);
  if (payloadSize > 0) size += lenFieldSize(payloadSize);
  size += measureStringMap(items.headers(i), headerSizes);
  return size + time.length;
}

/** Writes what measure() measured; `h` is where item i's header sizes start. Returns where the next item's start. */
function write(w: ProtoWriter, ids: Ids, idSize: number, items: NewItems, i: number, time: Buffer, headerSizes: number[], h: number): number {
  w.raw(MAGIC);
  if (idSize > 0) {
    w.len(1, idSize);
    ids.write(i, w);
  }
  const payloadSize = items.payloadSize(i);
  if (payloadSize > 0) {
    w.len(2, payloadSize);
    items.copyPayload(i, w.buf, w.pos);
    w.pos += payloadSize;
  }
  h = w.stringMap(3, items.headers(i), headerSizes, h);
  w.raw(time);
  return h;
}

/** The enqueue time field (4), the same for every item of an enqueue; nothing for 0. */
function timeField(enqueueTimeMs: number): Buffer {
  if (!Number.isSafeInteger(enqueueTimeMs) || enqueueTimeMs < 0) throw new RangeError(`enqueue time ${enqueueTimeMs} is not a time in ms`);
  const w = new ProtoWriter(Buffer.allocUnsafe(enqueueTimeMs > 0 ? varintFieldSize(enqueueTimeMs) : 0));
  if (enqueueTimeMs > 0) w.uint(4, enqueueTimeMs);
  return w.buf;
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
  const time = timeField(enqueueTimeMs);
  const items = itemsOf([{ payload, headers }]);
  const idSize = Buffer.byteLength(id);
  const ids: Ids = { size: () => idSize, write: (_, w) => void (w.pos += w.buf.write(id, w.pos, idSize, "utf8")) };
  const headerSizes: number[] = [];
  const w = new ProtoWriter(Buffer.allocUnsafe(measure(idSize, items, 0, time, headerSizes)));
  write(w, ids, idSize, items, 0, time, headerSizes, 0);
  return w.buf;
}

/**
 * The stored forms of items (encodeItem's bytes for each), framed for one
 * Redis command in a single buffer (no allocation per item), behind `room`
 * free bytes for the command's head. RESOURCE_EXHAUSTED, naming the item,
 * when one's stored form would be larger than `maxItemBytes`: headers count,
 * since a worker receives them with the payload.
 */
export function encodeItems(ids: ItemIds, items: NewItems, enqueueTimeMs: number, room = 0, maxItemBytes = Infinity): BulkStrings {
  const time = timeField(enqueueTimeMs);
  const idSizes = new Array<number>(items.count);
  const sizes = new Array<number>(items.count);
  const headerSizes: number[] = [];
  let total = 0;
  for (let i = 0; i < items.count; i++) {
    idSizes[i] = ids.size(i);
    sizes[i] = measure(idSizes[i], items, i, time, headerSizes);
    if (sizes[i] > maxItemBytes) {
      throw new SwitchyardError(
        "resource_exhausted",
        `item ${i} takes ${sizes[i]} bytes stored (a payload of ${items.payloadSize(i)} bytes, its headers, id and enqueue time); ` +
          `the limit is ${maxItemBytes} (SWITCHYARD_MAX_ITEM_BYTES): send smaller headers or payload`,
        { reason: "PAYLOAD_TOO_LARGE", violations: [{ field: `items[${i}]`, description: `at most ${maxItemBytes} bytes stored` }] },
      );
    }
    total += BulkStrings.framedSize(sizes[i]);
  }
  const w = new ProtoWriter(Buffer.allocUnsafe(room + total));
  w.pos = room;
  let h = 0;
  for (let i = 0; i < items.count; i++) {
    BulkStrings.begin(w, sizes[i]);
    h = write(w, ids, idSizes[i], items, i, time, headerSizes, h);
    BulkStrings.end(w);
  }
  return new BulkStrings(w.buf, items.count, room);
}

/** An item as stored, with the history a delivery that came back wrote (see scripts/lib.lua). */
export interface StoredItem extends Item {
  /** Deliveries so far (0 for an item never delivered, or delivered and not yet back). */
  deliveries: number;
  /** Why its last delivery failed ("" when none did). */
  lastError: string;
}

/**
 * Reads a stored value: an envelope when it is one (the magic bytes, then an
 * Envelope with an id or a history), otherwise a raw payload.
 */
export function decodeItem(value: Buffer): StoredItem {
  if (value.length >= MAGIC.length && value.subarray(0, MAGIC.length).equals(MAGIC)) {
    const bytes = value.subarray(MAGIC.length);
    let env: Envelope | undefined;
    try {
      env = fromBinary(EnvelopeSchema, bytes);
    } catch {
      // A dead-lettered stream entry's fields are its headers byte for byte (lib.lua entry_envelope), and a raw
      // XADD producer's need not be UTF-8: read those as a worker received them, else the item is raw.
      env = readEnvelopeLeniently(bytes);
    }
    // Switchyard's envelopes always carry an id or a history; without either, the magic bytes were a coincidence.
    if (env?.id || env?.history) {
      return {
        id: env.id, payload: env.payload, headers: env.headers, enqueueTimeMs: Number(env.enqueueTimeMs),
        deliveries: env.history?.deliveries ?? 0, lastError: env.history?.lastError ?? "",
      };
    }
  }
  return { id: "", payload: value, headers: {}, enqueueTimeMs: 0, deliveries: 0, lastError: "" };
}

/**
 * fromBinary(EnvelopeSchema, bytes), but a header key or value that is not
 * UTF-8 is read with U+FFFD for its bad bytes (as stream/entries.ts gives it to
 * a worker) rather than refused; undefined where fromBinary fails otherwise
 * too (not an envelope after all: a raw value that starts with the magic bytes).
 */
function readEnvelopeLeniently(bytes: Uint8Array): Envelope | undefined {
  try {
    const env = create(EnvelopeSchema);
    const r = new Reader(bytes);
    while (r.pos < r.len) {
      const [no, wireType] = r.tag();
      if (no === 1) env.id = r.string(true);
      else if (no === 2) env.payload = r.bytes();
      else if (no === 3) readHeader(r, env.headers, 1, false);
      else if (no === 4) env.enqueueTimeMs = r.int64() as bigint;
      else if (no === 5) env.history = readHistory(r, env.history);
      else r.skip(wireType, no, RECURSION_LIMIT - 1);
    }
    return env;
  } catch {
    return undefined;
  }
}

/** An Envelope's history (ItemHistory: 1 deliveries, 2 last_error, 3 last_fence), merged into `into` as fromBinary merges. */
function readHistory(r: Reader, into: ItemHistory | undefined): ItemHistory {
  const h = into ?? create(ItemHistorySchema);
  const end = r.messageEnd();
  while (r.pos < end) {
    const [no, wireType] = r.tag();
    if (no === 1) h.deliveries = r.uint32();
    else if (no === 2) h.lastError = r.string(true);
    else if (no === 3) h.lastFence = r.uint64() as bigint;
    else r.skip(wireType, no, RECURSION_LIMIT - 2);
  }
  return h;
}
