/**
 * The google.rpc.Status that gRPC's "grpc-status-details-bin" trailer carries:
 * the server writes one for every error status (a google.rpc.ErrorInfo with
 * domain "switchyard.v1" and the reason, and a google.rpc.BadRequest when
 * fields were wrong); the client reads the reason back. The messages are the
 * googleapis ones (third_party/proto), so any gRPC library's status helpers
 * decode them too.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyIs, anyPack, anyUnpack } from "@bufbuild/protobuf/wkt";
import { BadRequestSchema, ErrorInfoSchema } from "../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";

/** The trailer that carries the status. */
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";
/** ErrorInfo.domain of every error Switchyard sends. */
export const ERROR_DOMAIN = "switchyard.v1";

/** What an error status says besides its code and message. */
export interface StatusDetails {
  /** An ErrorReason name without its prefix, e.g. "LEASE_SUPERSEDED". */
  reason: string;
  /** Facts about the error, e.g. { queue: "{thumbnails}" }. */
  metadata: Record<string, string>;
  /** The request fields that were wrong (BadRequest), if any. */
  violations: { field: string; description: string }[];
}

/** The trailer's bytes for an error status. */
export function encodeStatusDetails(
  code: number,
  message: string,
  details: { reason: string; metadata?: Readonly<Record<string, string>>; violations?: readonly { field: string; description: string }[] },
): Buffer {
  const info = anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { reason: details.reason, domain: ERROR_DOMAIN, metadata: { ...details.metadata } }));
  const all = [info];
  if (details.violations?.length) {
    all.push(anyPack(BadRequestSchema, create(BadRequestSchema, { fieldViolations: details.violations.map((v) => ({ ...v })) })));
  }
  return Buffer.from(toBinary(StatusSchema, create(StatusSchema, { code, message, details: all })));
}

/** The details of a trailer's bytes, or undefined when they hold no ErrorInfo of Switchyard's (or do not decode). */
export function decodeStatusDetails(bytes: Uint8Array): StatusDetails | undefined {
  let status;
  try {
    status = fromBinary(StatusSchema, bytes);
  } catch {
    return undefined;
  }
  let out: StatusDetails | undefined;
  const violations: StatusDetails["violations"] = [];
  for (const any of status.details) {
    if (anyIs(any, ErrorInfoSchema)) {
      const info = anyUnpack(any, ErrorInfoSchema);
      if (info?.domain === ERROR_DOMAIN) out = { reason: info.reason, metadata: { ...info.metadata }, violations };
    } else if (anyIs(any, BadRequestSchema)) {
      for (const v of anyUnpack(any, BadRequestSchema)?.fieldViolations ?? []) violations.push({ field: v.field, description: v.description });
    }
  }
  return out;
}
