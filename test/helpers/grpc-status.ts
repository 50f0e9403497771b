/** The outcome of a call as a test checks it: its gRPC status code and message, and how long it took. */
import * as grpc from "@grpc/grpc-js";

export const Code = grpc.status;

/** Status of a settled call: code 0 when it succeeded, else its gRPC code and details; `ms` it took from now. */
export async function statusOf(call: Promise<unknown>): Promise<{ code: number; details: string; ms: number }> {
  const started = performance.now();
  try {
    await call;
    return { code: 0, details: "", ms: performance.now() - started };
  } catch (err) {
    const e = err as { code?: number; details?: string; message?: string };
    return { code: e.code ?? -1, details: e.details ?? e.message ?? String(err), ms: performance.now() - started };
  }
}
