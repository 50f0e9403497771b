import type { ErrorReason as ErrorReasonEnum } from "./gen/switchyard/v1/errors_pb.js";

/** The error codes Switchyard reports, named like gRPC's status codes. */
export type ErrorCode =
  | "invalid_argument"
  | "not_found"
  | "already_exists"
  | "failed_precondition"
  | "resource_exhausted"
  | "permission_denied"
  | "unauthenticated"
  | "unavailable"
  | "internal";

/**
 * Why an error happened, for clients to branch on: a name of switchyard.v1.ErrorReason
 * without its prefix (errors.proto, the one list), sent in the status's google.rpc.ErrorInfo.
 */
export type ErrorReason = Exclude<keyof typeof ErrorReasonEnum, "UNSPECIFIED">;

/** A request field that was wrong, and how (google.rpc.BadRequest.FieldViolation). */
export interface FieldViolation {
  field: string;
  description: string;
}

/** What an error says besides its code and message. */
export interface ErrorDetails {
  /** Why, for clients to branch on (required: every error a client sees carries one). */
  reason: ErrorReason;
  /** Logged, never sent. */
  cause?: unknown;
  violations?: readonly FieldViolation[];
  metadata?: Record<string, string>;
}

/**
 * A domain error. `message` is sent to the client and says what to fix;
 * `reason`, `violations` and `metadata` go with it as error details
 * (google.rpc.ErrorInfo and BadRequest, see src/grpc/status.ts); `cause` is logged, never sent.
 */
export class SwitchyardError extends Error {
  readonly reason: ErrorReason;
  readonly violations?: readonly FieldViolation[];
  /** Facts for the client (ErrorInfo metadata), e.g. { queue: "{thumbnails}" }. */
  readonly metadata?: Readonly<Record<string, string>>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    details: ErrorDetails,
  ) {
    super(message, { cause: details.cause });
    this.name = "SwitchyardError";
    this.reason = details.reason;
    this.violations = details.violations;
    this.metadata = details.metadata;
  }
}

/**
 * INVALID_ARGUMENT, reason INVALID_FIELD; with `field` (a request path such
 * as "items[3].delay"), also a BadRequest violation of that field saying `message`;
 * with `metadata`, facts a client can act on (ErrorInfo metadata).
 */
export function invalid(message: string, field?: string, metadata?: Record<string, string>): SwitchyardError {
  return new SwitchyardError("invalid_argument", message, {
    reason: "INVALID_FIELD",
    violations: field === undefined ? undefined : [{ field, description: message }],
    metadata,
  });
}
