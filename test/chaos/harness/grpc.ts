/** gRPC helpers for the chaos suite: health checks and statuses of failed calls. */
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type HealthCheckResponse,
} from "../../../src/gen/grpc/health/v1/health_pb.js";
import { clientConstructor } from "../../../src/grpc/adapter.js";

export { ServingStatus };

const HealthClient = clientConstructor(Health);

/** A health client of one address. */
export class HealthProbe {
  private readonly client: grpc.Client;

  constructor(address: string) {
    this.client = new HealthClient(address, grpc.credentials.createInsecure());
  }

  /** The server-wide status, or the gRPC code (negated) when the call failed. */
  check(timeoutMs = 1000): Promise<number> {
    return new Promise((ok) => {
      (this.client as unknown as { check: (...a: unknown[]) => void }).check(
        create(HealthCheckRequestSchema, { service: "" }),
        new grpc.Metadata(),
        { deadline: Date.now() + timeoutMs },
        (err: grpc.ServiceError | null, res: HealthCheckResponse) => ok(err ? -err.code : res.status),
      );
    });
  }

  /** Watches the server-wide status; `fn` gets every status with the time it arrived. */
  watch(fn: (status: ServingStatus, t: number) => void): () => void {
    const call = (this.client as unknown as { watch: (...a: unknown[]) => grpc.ClientReadableStream<HealthCheckResponse> }).watch(
      create(HealthCheckRequestSchema, { service: "" }),
      new grpc.Metadata(),
      {},
    );
    call.on("data", (r: HealthCheckResponse) => fn(r.status, Date.now()));
    call.on("error", () => undefined);
    return () => call.cancel();
  }

  close(): void {
    this.client.close();
  }
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
