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
 * without its prefix (errors.proto), sent in the status's google.rpc.ErrorInfo.
 */
export type ErrorReason =
  | "INVALID_FIELD" | "QUEUE_NOT_FOUND" | "QUEUE_EXISTS" | "SLOT_MISMATCH" | "KEY_NOT_ALLOWED" | "WRONG_KEY_TYPE"
  | "LEASE_SUPERSEDED" | "LEASE_NOT_HELD" | "LEASE_UNKNOWN" | "LEASE_TOKEN_INVALID" | "QUEUE_PAUSED"
  | "PAYLOAD_TOO_LARGE" | "LIMIT_EXCEEDED" | "REDIS_OUT_OF_MEMORY" | "REDIS_UNAVAILABLE" | "SHUTTING_DOWN"
  | "IMMUTABLE_FIELD" | "WRONG_QUEUE_MODE" | "GROUP_NOT_FOUND" | "GROUP_EXISTS" | "JOB_NOT_FOUND"
  | "INVALID_SCHEDULE" | "UNAUTHENTICATED" | "MISSING_SCOPE" | "INTERNAL";

/** A request field that was wrong, and how (google.rpc.BadRequest.FieldViolation). */
export interface FieldViolation {
  field: string;
  description: string;
}

/**
 * A domain error. `message` is sent to the client and says what to fix;
 * `reason` and `violations` go with it as error details; `cause` is logged, never sent.
 */
export class SwitchyardError extends Error {
  readonly reason?: ErrorReason;
  readonly violations?: readonly FieldViolation[];
  /** Facts for the client (ErrorInfo metadata), e.g. { queue: "{thumbnails}" }. */
  readonly metadata?: Readonly<Record<string, string>>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown; reason?: ErrorReason; violations?: readonly FieldViolation[]; metadata?: Record<string, string> },
  ) {
    super(message, options);
    this.name = "SwitchyardError";
    this.reason = options?.reason;
    this.violations = options?.violations;
    this.metadata = options?.metadata;
  }
}

/** Shorthand for `new SwitchyardError("invalid_argument", message)`. */
export function invalid(message: string): SwitchyardError {
  return new SwitchyardError("invalid_argument", message);
}
