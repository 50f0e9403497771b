/**
 * Items to enqueue as the enqueue path reads them: by index, a payload and
 * headers each. An array of NewItem is one kind (itemsOf); the other is
 * PackedItems, items left in the bytes that carried them, as an Enqueue
 * request's decoder leaves them: a thousand items in one request then cost no
 * object, no view and no headers map apiece.
 */

/** An item to enqueue. */
export interface NewItem {
  payload: Uint8Array;
  headers?: Record<string, string>;
}

/** Items to enqueue, read by index. */
export interface NewItems {
  readonly count: number;
  payloadSize(i: number): number;
  /** Writes item i's payload into `target` at `pos`. */
  copyPayload(i: number, target: Uint8Array, pos: number): void;
  /** Item i's headers (an empty record for none); the same record each time it is asked. */
  headers(i: number): Readonly<Record<string, string>>;
}

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

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
  private readonly source: Buffer;

  constructor(readonly bytes: Uint8Array) {
    this.source = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get count(): number {
    return this.starts.length;
  }

  /** Adds an item: its payload is bytes[start, end) (start -1: none), its headers `headers`. */
  add(start: number, end: number, headers?: Record<string, string>): void {
    if (headers) {
      this.headerSets ??= [];
      this.headerSets[this.starts.length] = headers;
    }
    this.starts.push(start);
    this.ends.push(end);
  }

  payloadSize(i: number): number {
    return this.starts[i] < 0 ? 0 : this.ends[i] - this.starts[i];
  }

  copyPayload(i: number, target: Uint8Array, pos: number): void {
    if (this.starts[i] >= 0) this.source.copy(target, pos, this.starts[i], this.ends[i]);
  }

  headers(i: number): Readonly<Record<string, string>> {
    return this.headerSets?.[i] ?? NO_HEADERS;
  }

  /** Item i's payload as a view of the bytes (a new empty array for none). */
  payload(i: number): Uint8Array {
    return this.starts[i] < 0 ? new Uint8Array(0) : this.bytes.subarray(this.starts[i], this.ends[i]);
  }

  /** Item i's own headers record; undefined when it had no header entries. */
  givenHeaders(i: number): Record<string, string> | undefined {
    return this.headerSets?.[i];
  }
}
