/**
 * What a failed call says besides its gRPC code and message: every error
 * Switchyard sends carries a google.rpc.ErrorInfo with a reason (errors.proto's
 * ErrorReason names, e.g. "LEASE_SUPERSEDED") and facts about it, and bad input
 * a google.rpc.BadRequest naming the fields. Branch on the reason, not on the
 * message text:
 *
 *   catch (err) { if (errorReason(err) === "QUEUE_NOT_FOUND") … }
 */
import * as grpc from "@grpc/grpc-js";
import type { ErrorReason } from "../errors.js";
import { decodeStatusDetails, encodeStatusDetails, STATUS_DETAILS_KEY, type StatusDetails } from "../wire/status-details.js";

export type { ErrorReason } from "../errors.js";
export type { StatusDetails } from "../wire/status-details.js";

/**
 * The details of a failed call (a grpc-js ServiceError, as every client method
 * rejects with), or undefined when it carries none: a status made by grpc-js
 * itself (DEADLINE_EXCEEDED, CANCELLED, a dropped connection's UNAVAILABLE) or by a proxy.
 */
export function errorDetails(err: unknown): StatusDetails | undefined {
  const metadata = (err as { metadata?: unknown } | undefined)?.metadata;
  if (!(metadata instanceof grpc.Metadata)) return undefined;
  const [bytes] = metadata.get(STATUS_DETAILS_KEY);
  return bytes instanceof Uint8Array ? decodeStatusDetails(bytes) : undefined;
}

/**
 * Why a call failed: the ErrorInfo reason, or undefined (see errorDetails).
 * A newer server may send a reason this client's type does not name yet.
 */
export function errorReason(err: unknown): ErrorReason | undefined {
  return errorDetails(err)?.reason as ErrorReason | undefined;
}

/**
 * An error shaped like the ones grpc-js gives for a failed call, for outcomes
 * the client learns otherwise (a result on a stream, its own deadline): with
 * `reason`, its metadata carries the details a unary call's status would.
 */
export function serviceError(code: grpc.status, details: string, reason?: string, metadata = new grpc.Metadata()): grpc.ServiceError {
  if (reason) metadata.set(STATUS_DETAILS_KEY, encodeStatusDetails(code, details, { reason }));
  return Object.assign(new Error(`${code} ${grpc.status[code]}: ${details}`), { code, details, metadata });
}
