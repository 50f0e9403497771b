/** The one place where domain errors become gRPC statuses. */
import * as grpc from "@grpc/grpc-js";
import { SwitchyardError, type ErrorCode } from "../errors.js";
import { isConnectionError, isOutOfMemory, isUnknownOutcome } from "../redis/connection.js";
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

/** A status to send for `err`: known errors keep their message, others are logged and hidden. */
export function toStatus(err: unknown, log: Logger, method: string): grpc.StatusObject {
  const metadata = new grpc.Metadata();
  if (err instanceof SwitchyardError) {
    if (err.cause) log.warn("request failed", { method, code: err.code, cause: err.cause });
    return { code: codes[err.code], details: err.message, metadata };
  }
  if (isOutOfMemory(err)) {
    log.warn("redis is out of memory", { method, err });
    const reason = /OOM command not allowed[^.]*/.exec((err as Error).message)![0];
    return {
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: `redis refused the command: ${reason} (redis is full: free memory in Redis, raise its maxmemory, or drain queues, then retry)`,
      metadata,
    };
  }
  if (isUnknownOutcome(err)) {
    log.warn("redis did not answer", { method, err });
    return {
      code: grpc.status.UNAVAILABLE,
      details:
        "redis did not answer within SWITCHYARD_REDIS_COMMAND_TIMEOUT, or its connection dropped: the call may or may not have " +
        "taken effect (see the README, Timeouts); retry once Redis answers",
      metadata,
    };
  }
  if (isConnectionError(err)) {
    log.warn("redis unavailable", { method, err });
    return { code: grpc.status.UNAVAILABLE, details: "redis is unavailable; retry later", metadata };
  }
  log.error("internal error", { method, err });
  return { code: grpc.status.INTERNAL, details: "internal error", metadata };
}

/** The gRPC status code for a domain error code. */
export function grpcCode(code: ErrorCode): grpc.status {
  return codes[code];
}

/** Throws INVALID_ARGUMENT when a request could not be decoded. */
export function assertWellFormed<T>(request: T | MalformedMessage): T {
  if (request instanceof MalformedMessage) {
    throw new SwitchyardError("invalid_argument", `malformed ${request.typeName}: ${request.reason}`);
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
