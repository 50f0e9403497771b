/**
 * Items to enqueue as the enqueue path reads them: by index, a payload and
 * headers each. An array of NewItem is one kind (itemsOf); the other is
 * PackedItems, items left in the bytes that carried them, as an Enqueue
 * request's decoder leaves them: a thousand items in one request then cost no
 * object, no view and no headers map apiece.
 */

import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";

/** An item to enqueue. */
export interface NewItem {
  payload: Uint8Array;
  headers?: Record<string, string>;
  /** When the item may be delivered: at once unless given. */
  schedule?: ItemSchedule;
  /** Makes the enqueue idempotent (queue.proto: EnqueueItem.idempotency_key); "" : none. */
  idempotencyKey?: string;
}

/** When an item may be delivered: at a time (ms since the epoch), or after a wait from its enqueue (ms). */
export type ItemSchedule = { notBeforeMs: number } | { delayMs: number };

/** Items to enqueue, read by index. */
export interface NewItems {
  readonly count: number;
  payloadSize(i: number): number;
  /** Writes item i's payload into `target` at `pos`. */
  copyPayload(i: number, target: Uint8Array, pos: number): void;
  /** Item i's headers (an empty record for none); the same record each time it is asked. */
  headers(i: number): Readonly<Record<string, string>>;
  /** Item i's schedule and idempotency key, when it has either. */
  options(i: number): ItemOptions | undefined;
  /** Whether any item has options (most enqueues have none, and skip looking). */
  readonly hasOptions: boolean;
  /**
   * Every payload has been copied out (the items are encoded as stored): bytes
   * held only to read them may go, though the call that carried them is still
   * open. No payload is read after it.
   */
  release?(): void;
}

/** What an item may say beyond its payload and headers. */
export interface ItemOptions {
  schedule?: ItemSchedule;
  idempotencyKey?: string;
  /** Both not_before and delay were given (refused). */
  conflict?: boolean;
}

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});
/** What a PackedItems holds once released. */
const RELEASED = Buffer.alloc(0);

/** An item's fields beyond payload and headers, as the wire gave them. */
export interface PackedExtras {
  notBefore?: Timestamp;
  delay?: Duration;
  idempotencyKey: string;
}

/** A Timestamp's time in ms (fractions of a ms dropped; may be out of range: the caller checks). */
function timestampMs(t: Timestamp): number {
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);
}

/** A Duration in ms, rounded up (may be negative or out of range: the caller checks). */
function durationToMs(d: Duration): number {
  return Number(d.seconds) * 1000 + Math.ceil(d.nanos / 1e6);
}

/** The schedule an item's not_before or delay asks for (not_before when both are given: the caller refuses that). */
export function extrasSchedule(e: Pick<PackedExtras, "notBefore" | "delay">): ItemSchedule | undefined {
  return e.notBefore ? { notBeforeMs: timestampMs(e.notBefore) } : e.delay ? { delayMs: durationToMs(e.delay) } : undefined;
}

class ItemArray implements NewItems {
  constructor(private readonly items: readonly NewItem[]) {}

  get count(): number {
    return this.items.length;
  }

  payloadSize(i: number): number {
    return this.items[i].payload.byteLength;
  }

  copyPayload(i: number, target: Uint8Array, pos: number): void {
    target.set(this.items[i].payload, pos);
  }

  headers(i: number): Readonly<Record<string, string>> {
    return this.items[i].headers ?? NO_HEADERS;
  }

  options(i: number): ItemOptions | undefined {
    const { schedule, idempotencyKey } = this.items[i];
    return schedule || idempotencyKey ? { schedule, idempotencyKey } : undefined;
  }

  get hasOptions(): boolean {
    return this.items.some((it) => it.schedule || it.idempotencyKey);
  }
}

/** `items` as NewItems. */
export function itemsOf(items: readonly NewItem[] | NewItems): NewItems {
  return Array.isArray(items) ? new ItemArray(items) : (items as NewItems);
}

/**
 * Items whose payloads are ranges of one buffer. A payload that was never
 * given (rather than given empty) starts at -1.
 */
export class PackedItems implements NewItems {
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  /** Each item's headers, kept from the first item that has any. */
  private headerSets?: (Record<string, string> | undefined)[];
  /** Each item's other fields as given (protobuf messages), kept from the first item that has any. */
  private extraSets?: (PackedExtras | undefined)[];
  private source: Buffer;

  constructor(private bytes: Uint8Array) {
    this.source = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /**
   * Lets the request's bytes go: while its call waits for Redis, a pending
   * Enqueue holds its items as stored (on their way to Redis) and no longer
   * also as they came; the call's request still holds this object. (grpc-js
   * 1.14's decoder still keeps the chunks that carried a unary call's one
   * message until the call ends: a third copy before this, a second now.)
   */
  release(): void {
    this.bytes = this.source = RELEASED;
  }

  /** The request's bytes, unless released (a payload read after release() is a bug, not an empty payload). */
  private held(): Buffer {
    if (this.source === RELEASED) throw new Error("PackedItems: a payload read after release()");
    return this.source;
  }

  get count(): number {
    return this.starts.length;
  }

  /** Adds an item: its payload is bytes[start, end) (start -1: none), its headers `headers`, its other fields `extras`. */
  add(start: number, end: number, headers?: Record<string, string>, extras?: PackedExtras): void {
    if (headers) {
      this.headerSets ??= [];
      this.headerSets[this.starts.length] = headers;
    }
    if (extras) {
      this.extraSets ??= [];
      this.extraSets[this.starts.length] = extras;
    }
    this.starts.push(start);
    this.ends.push(end);
  }

  payloadSize(i: number): number {
    return this.starts[i] < 0 ? 0 : this.ends[i] - this.starts[i];
  }

  copyPayload(i: number, target: Uint8Array, pos: number): void {
    if (this.starts[i] >= 0) this.held().copy(target, pos, this.starts[i], this.ends[i]);
  }

  headers(i: number): Readonly<Record<string, string>> {
    return this.headerSets?.[i] ?? NO_HEADERS;
  }

  /** Item i's payload as a view of the bytes (a new empty array for none). */
  payload(i: number): Uint8Array {
    if (this.starts[i] < 0) return new Uint8Array(0);
    this.held();
    return this.bytes.subarray(this.starts[i], this.ends[i]);
  }

  /** Item i's own headers record; undefined when it had no header entries. */
  givenHeaders(i: number): Record<string, string> | undefined {
    return this.headerSets?.[i];
  }

  /** Item i's not_before, delay and idempotency_key as read; undefined when it had none. */
  givenExtras(i: number): PackedExtras | undefined {
    return this.extraSets?.[i];
  }

  get hasOptions(): boolean {
    return this.extraSets !== undefined;
  }

  options(i: number): ItemOptions | undefined {
    const e = this.extraSets?.[i];
    if (!e) return undefined;
    return { schedule: extrasSchedule(e), idempotencyKey: e.idempotencyKey || undefined, conflict: e.notBefore !== undefined && e.delay !== undefined };
  }
}
