/**
 * W3C trace context (https://www.w3.org/TR/trace-context/) across the queue: a
 * `traceparent` (and `tracestate`) sent as Enqueue metadata goes into the
 * headers of each item that has no `traceparent` of its own, and so reaches
 * the worker with the delivery. Switchyard starts no spans itself; with
 * OpenTelemetry preloaded (README, "Tracing"), its gRPC instrumentation does.
 */
import type * as grpc from "@grpc/grpc-js";
import { itemsOf, type ItemOptions, type NewItem, type NewItems } from "../queue/new-items.js";

/** The W3C trace context header (and metadata key). */
export const TRACEPARENT = "traceparent";
/** Vendor trace state that goes with it. */
export const TRACESTATE = "tracestate";

/** version-traceid-parentid-flags; version ff and all-zero ids are invalid. */
const traceparent = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-[0-9a-f-]*)?$/;
const MAX_TRACESTATE = 512;

/** The trace context of a call, when its metadata carries a valid `traceparent`. */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}

function first(metadata: grpc.Metadata, key: string): string | undefined {
  const value = metadata.get(key)[0];
  return typeof value === "string" ? value.trim() : undefined;
}

/** Reads a valid `traceparent` (and `tracestate`) from call metadata; undefined otherwise. */
export function traceOf(metadata: grpc.Metadata): TraceContext | undefined {
  const parent = first(metadata, TRACEPARENT)?.toLowerCase();
  const m = parent ? traceparent.exec(parent) : null;
  if (!m || m[1] === "ff" || /^0+$/.test(m[2]) || /^0+$/.test(m[3]) || (m[1] === "00" && m[4])) return undefined;
  const state = first(metadata, TRACESTATE);
  return { traceparent: parent!, tracestate: state && state.length <= MAX_TRACESTATE ? state : undefined };
}

/** Items with `trace` added to the headers of every one without a traceparent of its own. */
class TracedItems implements NewItems {
  private readonly traced: Readonly<Record<string, string>>[] = [];

  constructor(
    private readonly items: NewItems,
    trace: TraceContext,
  ) {
    for (let i = 0; i < items.count; i++) {
      const own = items.headers(i);
      if (own[TRACEPARENT]) {
        this.traced.push(own);
        continue;
      }
      const headers: Record<string, string> = { ...own, [TRACEPARENT]: trace.traceparent };
      if (trace.tracestate) headers[TRACESTATE] = trace.tracestate;
      this.traced.push(headers);
    }
  }

  get count(): number {
    return this.items.count;
  }

  payloadSize(i: number): number {
    return this.items.payloadSize(i);
  }

  copyPayload(i: number, target: Uint8Array, pos: number): void {
    this.items.copyPayload(i, target, pos);
  }

  headers(i: number): Readonly<Record<string, string>> {
    return this.traced[i];
  }

  options(i: number): ItemOptions | undefined {
    return this.items.options(i);
  }

  get hasOptions(): boolean {
    return this.items.hasOptions;
  }

  release(): void {
    this.items.release?.();
  }
}

/** Adds `trace` to the headers of every item without a traceparent of its own. */
export function withTrace(items: readonly NewItem[] | NewItems, trace: TraceContext | undefined): NewItems {
  return trace ? new TracedItems(itemsOf(items), trace) : itemsOf(items);
}
