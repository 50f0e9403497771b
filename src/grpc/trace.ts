/**
 * W3C trace context (https://www.w3.org/TR/trace-context/) across the queue: a
 * `traceparent` (and `tracestate`) sent as Enqueue metadata goes into the
 * headers of each item that has no `traceparent` of its own, and so reaches
 * the worker with the delivery. Switchyard starts no spans itself; with
 * OpenTelemetry preloaded (README, "Tracing"), its gRPC instrumentation does.
 */
import type * as grpc from "@grpc/grpc-js";
import type { NewItem } from "../queue/queues.js";

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

/** Adds `trace` to the headers of every item without a traceparent of its own. */
export function withTrace(items: NewItem[], trace: TraceContext | undefined): NewItem[] {
  if (!trace) return items;
  return items.map((item) => {
    if (item.headers?.[TRACEPARENT]) return item;
    const headers: Record<string, string> = { ...item.headers, [TRACEPARENT]: trace.traceparent };
    if (trace.tracestate) headers[TRACESTATE] = trace.tracestate;
    return { ...item, headers };
  });
}
