/**
 * How items are stored in a queue list. Switchyard wraps what it enqueues in an
 * envelope (id, headers, enqueue time); any other value is a raw payload, as a
 * plain `LPUSH` from any Redis client writes it (SPEC Q1).
 */
import { SwitchyardError } from "../errors.js";
import { BulkStrings } from "../redis/bulk-strings.js";
import { setHeader } from "../wire/proto-reader.js";
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
 * Reads a stored value: an envelope when it is one, otherwise a raw payload.
 * A value is an envelope exactly when lib.lua's read_item reads it as one, so
 * that a retry, a return or the watchdog, which rewrite it with its history,
 * leave the item a worker sees as it was: the magic bytes, then well-formed
 * fields (numbers 1 to 2^29 - 1, no groups, Envelope's own fields 1 to 5 with
 * their own wire types), and an id (the last id field not empty) or a history.
 * A header entry or a history malformed inside is read as none (the Lua keeps
 * the one and drops the other); text that is not UTF-8 is read with U+FFFD;
 * an enqueue time before 1970 or after 9999 is read as none (0).
 */
export function decodeItem(value: Buffer): StoredItem {
  if (value.length >= MAGIC.length && value[0] === 0x53 && value[1] === 0x59 && value[2] === 0x45 && value[3] === 0x31) {
    const item = readEnvelope(value);
    if (item) return item;
  }
  return { id: "", payload: value, headers: {}, enqueueTimeMs: 0, deliveries: 0, lastError: "" };
}

/** Protobuf's largest field number. */
const MAX_FIELD = 0x1fffffff;
/** The wire type of each field of Envelope (1 id, 2 payload, 3 a header, 4 enqueue time, 5 history), of a header entry (1 key, 2 value), and of ItemHistory (1 deliveries, 2 last error, 3 last fence). */
const ENVELOPE_WIRE = [-1, 2, 2, 2, 0, 2];
const ENTRY_WIRE = [-1, 2, 2];
const HISTORY_WIRE = [-1, 0, 2, 0];
const EMPTY = Buffer.alloc(0);
/** The last ms of year 9999, google.protobuf.Timestamp's last instant. */
const MAX_TIME_MS = 253_402_300_799_999;

/**
 * One field of a message, as lib.lua's next_field reads it: its number,
 * payload [data, end) and, for a varint, its value (a double, as Lua has
 * it). next() returns false when the message ends, and throws
 * {@link MALFORMED} where next_field answers nil.
 */
class FieldReader {
  field = 0;
  data = 0;
  end = 0;
  value = 0;

  constructor(
    private readonly b: Buffer,
    private pos: number,
    private readonly limit: number,
    /** Per field number, the wire type the field must have (a field beyond it may have any). */
    private readonly wires: readonly number[],
  ) {}

  next(): boolean {
    if (this.pos >= this.limit) return false;
    const tag = this.varint(this.pos);
    const wire = tag % 8;
    const field = (tag - wire) / 8;
    if (field === 0 || field > MAX_FIELD) throw MALFORMED;
    this.data = this.end;
    if (wire === 0) this.value = this.varint(this.data);
    else if (wire === 2) {
      const len = this.varint(this.data);
      this.data = this.end;
      this.end += len;
    } else if (wire === 1) this.end = this.data + 8;
    else if (wire === 5) this.end = this.data + 4;
    else throw MALFORMED;
    if (this.end > this.limit) throw MALFORMED;
    if (field < this.wires.length && wire !== this.wires[field]) throw MALFORMED;
    this.field = field;
    this.pos = this.end;
    return true;
  }

  /** The varint at `pos` (at most 10 bytes); sets `end` after it. */
  private varint(pos: number): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10 && pos < this.limit; i++) {
      const byte = this.b[pos++];
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) {
        this.end = pos;
        return value;
      }
      scale *= 128;
    }
    throw MALFORMED;
  }
}

const MALFORMED = new Error("malformed protobuf");

/** The StoredItem of an envelope `v` ("SYE1" and an Envelope), or undefined when lib.lua would read it as a raw payload. */
function readEnvelope(v: Buffer): StoredItem | undefined {
  const r = new FieldReader(v, MAGIC.length, v.length, ENVELOPE_WIRE);
  let idStart = 0;
  let idEnd = 0;
  let payload: Uint8Array = EMPTY;
  const headers: Record<string, string> = {};
  let enqueueTimeMs = 0;
  let history = false;
  let deliveries = 0;
  let lastError = "";
  try {
    while (r.next()) {
      switch (r.field) {
        case 1:
          idStart = r.data;
          idEnd = r.end;
          break;
        case 2:
          payload = v.subarray(r.data, r.end);
          break;
        case 3:
          readEntry(v, r.data, r.end, headers);
          break;
        case 4:
          // An outside writer's time that no Timestamp can carry is none: past year 9999, or before 1970 (an
          // int64 under 0 is a varint of 2^63 or more, past 9999 too). Exact where it counts (under 2^53).
          enqueueTimeMs = r.value <= MAX_TIME_MS ? r.value : 0;
          break;
        case 5: {
          history = true;
          const h = readHistory(v, r.data, r.end, deliveries, lastError);
          if (h) [deliveries, lastError] = h;
          break;
        }
      }
    }
  } catch (err) {
    if (err === MALFORMED) return undefined;
    throw err;
  }
  if (idEnd === idStart && !history) return undefined;
  return { id: v.toString("utf8", idStart, idEnd), payload, headers, enqueueTimeMs, deliveries, lastError };
}

/** A header entry in [from, to) of `v` into `headers` (a later key wins); left out when malformed inside. */
function readEntry(v: Buffer, from: number, to: number, headers: Record<string, string>): void {
  const r = new FieldReader(v, from, to, ENTRY_WIRE);
  let key = "";
  let value = "";
  try {
    while (r.next()) {
      if (r.field === 1) key = v.toString("utf8", r.data, r.end);
      else if (r.field === 2) value = v.toString("utf8", r.data, r.end);
    }
  } catch (err) {
    if (err === MALFORMED) return;
    throw err;
  }
  setHeader(headers, key, value);
}

/** An ItemHistory in [from, to) of `v` merged over `deliveries` and `lastError`, or undefined when malformed inside (lib.lua's read_history). */
function readHistory(v: Buffer, from: number, to: number, deliveries: number, lastError: string): [number, string] | undefined {
  const r = new FieldReader(v, from, to, HISTORY_WIRE);
  try {
    while (r.next()) {
      if (r.field === 1) deliveries = r.value % 4294967296; // a uint32, as protobuf reads it
      else if (r.field === 2) lastError = v.toString("utf8", r.data, r.end);
    }
  } catch (err) {
    if (err === MALFORMED) return undefined;
    throw err;
  }
  return [deliveries, lastError];
}
