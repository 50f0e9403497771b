/** gRPC helpers for the chaos suite: health checks and statuses of failed calls. */
import * as grpc from "@grpc/grpc-js";
export { HealthProbe, ServingStatus } from "../../helpers/health.js";

/** The gRPC status code a promise failed with (0 when it succeeded). */
export async function codeOf(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 0;
  } catch (err) {
    return (err as { code?: number }).code ?? -1;
  }
}

export const Code = grpc.status;

/** Declares a reliable queue `{name}` with a recovery set (min_idle in ms) and max deliveries. */
export async function declareReliable(
  client: import("../../../src/client/client.js").SwitchyardClient,
  name: string,
  options: { minIdleMs?: number; maxDeliveries?: number; recovery?: boolean } = {},
): Promise<void> {
  const minIdleMs = options.minIdleMs ?? 60_000;
  await client.createQueue({
    name,
    mode: 2, // QUEUE_MODE_RELIABLE
    ...(options.recovery === false
      ? {}
      : {
          recoverySet: `${name}.claims`,
          minIdle: { seconds: BigInt(Math.floor(minIdleMs / 1000)), nanos: (minIdleMs % 1000) * 1e6 },
        }),
    ...(options.maxDeliveries ? { maxDeliveries: options.maxDeliveries } : {}),
  });
}

/** Every log entry of a job (all pages), with its tick time in ms. */
export async function allJobLogs(
  client: import("../../../src/client/client.js").SwitchyardClient,
  jobId: string,
): Promise<(import("../../../src/gen/switchyard/v1/cron_pb.js").JobLog & { tickMs: number })[]> {
  const out: (import("../../../src/gen/switchyard/v1/cron_pb.js").JobLog & { tickMs: number })[] = [];
  let token = "";
  do {
    const page = await client.listJobLogs(jobId, 1000, token);
    for (const l of page.logs) out.push(Object.assign(l, { tickMs: l.tickTime ? Number(l.tickTime.seconds) * 1000 + l.tickTime.nanos / 1e6 : 0 }));
    token = page.nextPageToken;
  } while (token);
  return out;
}
