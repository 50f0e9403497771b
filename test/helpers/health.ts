/** A client of grpc.health.v1.Health for tests: Check and Watch of the server-wide status. */
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type HealthCheckResponse,
} from "../../src/gen/grpc/health/v1/health_pb.js";
import { clientConstructor } from "../../src/grpc/adapter.js";

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

  /** Watches the server-wide status; `fn` gets every status with the time it arrived, `failed` the call's error. */
  watch(fn: (status: ServingStatus, t: number) => void, failed: (err: grpc.ServiceError) => void = () => undefined): () => void {
    const call = (this.client as unknown as { watch: (...a: unknown[]) => grpc.ClientReadableStream<HealthCheckResponse> }).watch(
      create(HealthCheckRequestSchema, { service: "" }),
      new grpc.Metadata(),
      {},
    );
    call.on("data", (r: HealthCheckResponse) => fn(r.status, Date.now()));
    call.on("error", failed);
    return () => call.cancel();
  }

  close(): void {
    this.client.close();
  }
}
