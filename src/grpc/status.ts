/** The one place where domain errors become gRPC statuses. */
import * as grpc from "@grpc/grpc-js";
import { SwitchyardError, type ErrorCode, type ErrorReason } from "../errors.js";
import { encodeStatusDetails, STATUS_DETAILS_KEY } from "../wire/status-details.js";
import { isConnectionError, isUnknownOutcome, outOfMemoryRefusal } from "../redis/connection.js";
import { withFields, type Logger } from "../log.js";
import { MalformedMessage } from "./adapter.js";
import { requestIdOf } from "./observe.js";

const codes: Record<ErrorCode, grpc.status> = {
  invalid_argument: grpc.status.INVALID_ARGUMENT,
  not_found: grpc.status.NOT_FOUND,
  already_exists: grpc.status.ALREADY_EXISTS,
  failed_precondition: grpc.status.FAILED_PRECONDITION,
  resource_exhausted: grpc.status.RESOURCE_EXHAUSTED,
  permission_denied: grpc.status.PERMISSION_DENIED,
  unauthenticated: grpc.status.UNAUTHENTICATED,
  unavailable: grpc.status.UNAVAILABLE,
  internal: grpc.status.INTERNAL,
};

/** A status as Switchyard sends it: its trailers carry the google.rpc.Status; `reason` for in-band results. */
export interface SwitchyardStatus extends grpc.StatusObject {
  reason: ErrorReason;
}

/**
 * The status for a domain error, with its details in the "grpc-status-details-bin"
 * trailer: ErrorInfo (reason, domain "switchyard.v1", metadata) and, for bad input, BadRequest.
 */
export function errorStatus(err: SwitchyardError): SwitchyardStatus {
  const code = codes[err.code];
  const metadata = new grpc.Metadata();
  metadata.set(STATUS_DETAILS_KEY, encodeStatusDetails(code, err.message, err));
  return { code, details: err.message, metadata, reason: err.reason };
}

/** A status to send for `err`: known errors keep their message, others are logged and hidden. */
export function toStatus(err: unknown, log: Logger, method: string): SwitchyardStatus {
  return errorStatus(domainError(err, log, method));
}

/** `err` as a domain error: Redis's out of memory and unavailability named, anything else INTERNAL (and logged). */
function domainError(err: unknown, log: Logger, method: string): SwitchyardError {
  if (err instanceof SwitchyardError) {
    if (err.cause) log.warn("request failed", { method, code: err.code, cause: err.cause });
    return err;
  }
  const reason = outOfMemoryRefusal(err);
  if (reason !== undefined) {
    log.warn("redis is out of memory", { method, err });
    return new SwitchyardError(
      "resource_exhausted",
      `redis refused the command: ${reason} (redis is full: free memory in Redis, raise its maxmemory, or drain queues, then retry)`,
      { reason: "REDIS_OUT_OF_MEMORY" },
    );
  }
  if (isUnknownOutcome(err)) {
    log.warn("redis did not answer", { method, err });
    return new SwitchyardError(
      "unavailable",
      "redis did not answer within SWITCHYARD_REDIS_COMMAND_TIMEOUT, or its connection dropped: the call may or may not have " +
        "taken effect (see the README, Timeouts); retry once Redis answers",
      { reason: "REDIS_UNAVAILABLE" },
    );
  }
  if (isConnectionError(err)) {
    log.warn("redis unavailable", { method, err });
    return new SwitchyardError("unavailable", "redis is unavailable; retry later", { reason: "REDIS_UNAVAILABLE" });
  }
  log.error("internal error", { method, err });
  return new SwitchyardError("internal", "internal error", { reason: "INTERNAL" });
}

/** Throws INVALID_ARGUMENT when a request could not be decoded. */
export function assertWellFormed<T>(request: T | MalformedMessage): T {
  if (request instanceof MalformedMessage) {
    throw new SwitchyardError("invalid_argument", `malformed ${request.typeName}: ${request.reason}`, { reason: "INVALID_FIELD" });
  }
  return request;
}

/** `log` with the call's request id on every line (see observe.ts). */
export function callLogger(log: Logger, metadata: grpc.Metadata): Logger {
  const requestId = requestIdOf(metadata);
  return requestId ? withFields(log, { requestId }) : log;
}

/** Wraps a promise-returning handler as a grpc-js unary handler with status mapping. */
export function unary<Req, Res>(
  log: Logger,
  method: string,
  fn: (request: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res>,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => fn(assertWellFormed(call.request as Req | MalformedMessage), call))
      .then(
        (response) => callback(null, response),
        (err: unknown) => callback(toStatus(err, callLogger(log, call.metadata), method)),
      );
  };
}
