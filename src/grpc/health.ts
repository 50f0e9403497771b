/** The standard gRPC health service (grpc.health.v1): Check and Watch. */
import * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import {
  type HealthCheckRequest,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthCheckResponseSchema,
} from "../gen/grpc/health/v1/health_pb.js";
import { MalformedMessage } from "./adapter.js";

export { ServingStatus };

/** Serving status per service name ("" is the whole server). */
export class Health {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Set<{ service: string; send: (s: ServingStatus) => void }>();

  /** `maxWatches`: Watch calls open at once; more are RESOURCE_EXHAUSTED (Watch needs no credentials, so anyone could hold them). */
  constructor(
    services: string[],
    private readonly maxWatches = Infinity,
  ) {
    for (const s of ["", ...services]) this.statuses.set(s, ServingStatus.NOT_SERVING);
  }

  /** Sets every known service's status, telling watchers of changes. */
  setAll(status: ServingStatus): void {
    for (const service of this.statuses.keys()) {
      if (this.statuses.get(service) === status) continue;
      this.statuses.set(service, status);
      for (const w of this.watchers) if (w.service === service) w.send(status);
    }
  }

  status(service: string): ServingStatus | undefined {
    return this.statuses.get(service);
  }

  /** grpc-js handlers for grpc.health.v1.Health. */
  handlers(): grpc.UntypedServiceImplementation {
    return {
      check: (call: grpc.ServerUnaryCall<HealthCheckRequest | MalformedMessage, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        const req = call.request;
        if (req instanceof MalformedMessage) {
          callback({ code: grpc.status.INVALID_ARGUMENT, details: `malformed ${req.typeName}` });
          return;
        }
        const status = this.statuses.get(req.service);
        if (status === undefined) callback({ code: grpc.status.NOT_FOUND, details: `unknown service "${req.service}"` });
        else callback(null, create(HealthCheckResponseSchema, { status }));
      },
      watch: (call: grpc.ServerWritableStream<HealthCheckRequest | MalformedMessage, unknown>) => {
        const req = call.request;
        if (req instanceof MalformedMessage) {
          call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: `malformed ${req.typeName}` });
          return;
        }
        if (this.watchers.size >= this.maxWatches) {
          call.emit("error", {
            code: grpc.status.RESOURCE_EXHAUSTED,
            details: `${this.watchers.size} health Watch calls are open on this instance, the limit (SWITCHYARD_MAX_HEALTH_WATCHES); use Check, or close a Watch`,
          });
          return;
        }
        const service = req.service;
        const send = (status: ServingStatus) => call.write(create(HealthCheckResponseSchema, { status }));
        const watcher = { service, send };
        this.watchers.add(watcher);
        send(this.statuses.get(service) ?? ServingStatus.SERVICE_UNKNOWN);
        call.on("cancelled", () => this.watchers.delete(watcher));
        call.on("close", () => this.watchers.delete(watcher));
      },
    };
  }
}
