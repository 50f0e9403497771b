/**
 * Watches every gRPC call from the wire's side (a grpc-js server interceptor):
 * gives it a request id, counts and times it and its messages each way, and
 * writes one log line when it ends. It sits innermost, so it also sees calls
 * that another interceptor (authentication) refuses before any handler runs.
 *
 * The request id is the caller's `x-request-id` when that is a short token,
 * or a new UUID; handlers find it in the call's metadata ({@link requestIdOf})
 * and the caller gets it back in the response headers (or trailers).
 */
import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import type { Logger } from "../log.js";
import type { GrpcMetrics } from "../metrics/hooks.js";

/** The metadata key of the request id. */
export const REQUEST_ID = "x-request-id";

const validId = /^[\w.:/+=-]{1,128}$/;

/** Status names as Go's grpc codes print them, which Prometheus dashboards for gRPC expect. */
const codeNames: Record<number, string> = {
  0: "OK", 1: "Canceled", 2: "Unknown", 3: "InvalidArgument", 4: "DeadlineExceeded", 5: "NotFound",
  6: "AlreadyExists", 7: "PermissionDenied", 8: "ResourceExhausted", 9: "FailedPrecondition", 10: "Aborted",
  11: "OutOfRange", 12: "Unimplemented", 13: "Internal", 14: "Unavailable", 15: "DataLoss", 16: "Unauthenticated",
};

/** Codes that point at the server rather than the caller: logged as warnings. */
const serverFaults = new Set([2, 13, 14, 15]);

/** The request id of a call whose metadata passed through {@link observeCalls} ("" otherwise). */
export function requestIdOf(metadata: grpc.Metadata): string {
  const value = metadata.get(REQUEST_ID)[0];
  return typeof value === "string" ? value : "";
}

function callType(method: grpc.ServerMethodDefinition<unknown, unknown>): string {
  if (method.requestStream) return method.responseStream ? "bidi_stream" : "client_stream";
  return method.responseStream ? "server_stream" : "unary";
}

/** "/pkg.Service/Method" → ["pkg.Service", "Method"]. */
function splitPath(path: string): [string, string] {
  const slash = path.lastIndexOf("/");
  return [path.slice(1, slash), path.slice(slash + 1)];
}

/** The interceptor; `metrics` counts and times calls, `log` gets one line per call. */
export function observeCalls(metrics: GrpcMetrics, log: Logger): grpc.ServerInterceptor {
  return (method, call) => {
    const [service, name] = splitPath(method.path);
    const type = callType(method);
    const started = process.hrtime.bigint();
    let requestId = "";
    let ended = false;
    let sentHeaders = false;
    metrics.started(service, name, type);
    const end = (code: number) => {
      if (ended) return;
      ended = true;
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const codeName = codeNames[code] ?? String(code);
      metrics.handled(service, name, type, codeName, seconds);
      const fields = { requestId, service, method: name, code: codeName, ms: Math.round(seconds * 1e4) / 10 };
      if (code === 0) log.debug("rpc finished", fields);
      else if (serverFaults.has(code)) log.warn("rpc failed", fields);
      else log.info("rpc failed", fields);
    };
    return new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, pass) => {
            const given = requestIdOf(metadata);
            requestId = validId.test(given) ? given : randomUUID();
            metadata.set(REQUEST_ID, requestId);
            pass(metadata);
          },
          onReceiveMessage: (message, pass) => {
            metrics.received(service, name, type);
            pass(message);
          },
          onCancel: () => end(grpc.status.CANCELLED),
        }),
      sendMessage: (message, pass) => {
        metrics.sent(service, name, type);
        pass(message);
      },
      sendMetadata: (metadata, pass) => {
        if (requestId) metadata.set(REQUEST_ID, requestId);
        sentHeaders = true;
        pass(metadata);
      },
      sendStatus: (status, pass) => {
        end(status.code ?? grpc.status.UNKNOWN);
        // A call that failed before sending anything answers with trailers only: the id goes there.
        if (requestId && !sentHeaders) {
          const trailers = status.metadata ?? new grpc.Metadata();
          trailers.set(REQUEST_ID, requestId);
          pass({ ...status, metadata: trailers });
        } else pass(status);
      },
    });
  };
}
