/** gRPC helpers for the chaos suite: health checks and statuses of failed calls. */
import * as grpc from "@grpc/grpc-js";
import { HealthProbe, ServingStatus } from "../../helpers/health.js";

export { HealthProbe, ServingStatus };

/** gRPC health as one Watch call saw it: every status with when it came. */
export interface HealthRecord {
  readonly seen: { status: ServingStatus; t: number }[];
  /** When `status` was first seen after `after` (ms since the epoch), if it was. */
  firstAfter(status: ServingStatus, after: number): number | undefined;
  /** "SERVING → NOT_SERVING +5.1 s → SERVING +16.0 s", times from `origin`. */
  summary(origin: number): string;
  stop(): void;
}

/** Watches `address`'s server-wide health until stop(). */
export function recordHealth(address: string): HealthRecord {
  const probe = new HealthProbe(address);
  const seen: { status: ServingStatus; t: number }[] = [];
  const unwatch = probe.watch((status, t) => seen.push({ status, t }));
  return {
    seen,
    firstAfter: (status, after) => seen.find((s) => s.status === status && s.t >= after)?.t,
    summary: (origin) =>
      seen.map((s, i) => (i === 0 ? ServingStatus[s.status] : `${ServingStatus[s.status]} +${((s.t - origin) / 1000).toFixed(1)} s`)).join(" → "),
    stop() {
      unwatch();
      probe.close();
    },
  };
}

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
