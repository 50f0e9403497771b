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
 * A domain error. `message` is sent to the client and says what to fix;
 * `cause` is logged, never sent.
 */
export class SwitchyardError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "SwitchyardError";
  }
}

/** Shorthand for `new SwitchyardError("invalid_argument", message)`. */
export function invalid(message: string): SwitchyardError {
  return new SwitchyardError("invalid_argument", message);
}
