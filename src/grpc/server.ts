/** Builds the gRPC server: queue service, health and reflection, one adapter for all. */
import * as grpc from "@grpc/grpc-js";
import type { DescFile } from "@bufbuild/protobuf";
import { file_grpc_health_v1_health, Health as HealthDesc } from "../gen/grpc/health/v1/health_pb.js";
import { ServerReflection } from "../gen/grpc/reflection/v1/reflection_pb.js";
import { file_switchyard_v1_queue, QueueService } from "../gen/switchyard/v1/queue_pb.js";
import { CronService, file_switchyard_v1_cron } from "../gen/switchyard/v1/cron_pb.js";
import { AuditService, file_switchyard_v1_audit } from "../gen/switchyard/v1/audit_pb.js";
import { AuthService, file_switchyard_v1_auth } from "../gen/switchyard/v1/auth_pb.js";
import { authServiceHandlers } from "./auth-service.js";
import type { AuditLogStore } from "../auth/audit-log.js";
import { auditServiceHandlers } from "./audit-service.js";
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import type { Queues } from "../queue/queues.js";
import { serviceDefinition } from "./adapter.js";
import { Health } from "./health.js";
import { queueServiceHandlers } from "./queue-service.js";
import { DeliveryBuffers } from "./delivery-buffers.js";
import { cronServiceHandlers, type CronParts } from "./cron-service.js";
import { reflectionHandlers } from "./reflection.js";

/** The API files served by reflection. */
const apiFiles: DescFile[] = [
  file_switchyard_v1_queue, file_switchyard_v1_cron, file_switchyard_v1_audit, file_switchyard_v1_auth, file_grpc_health_v1_health,
];

/** A gRPC server not yet bound, and its health registry. */
export interface GrpcServer {
  server: grpc.Server;
  health: Health;
}

/**
 * Creates the server with every service registered. `interceptors` run in
 * grpc-js order: the first is the innermost, nearest the wire.
 */
export function createGrpcServer(
  config: Config,
  queues: Queues,
  cron: CronParts,
  log: Logger,
  interceptors: grpc.ServerInterceptor[] = [],
  audit?: AuditLogStore,
  buffers = new DeliveryBuffers(config.maxStreamBufferBytes, config.maxBufferedBytes),
): GrpcServer {
  const options: grpc.ServerOptions = {
    interceptors,
    "grpc.max_receive_message_length": config.maxMessageBytes,
    "grpc.max_send_message_length": config.maxMessageBytes,
    // Answer client keepalive pings on idle lease streams.
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.http2.min_ping_interval_without_data_ms": 10_000,
    // No channelz service is served, so its per-call bookkeeping is only a cost (~5% of a unary call's CPU).
    "grpc.enable_channelz": 0,
    // The server would otherwise advertise 2^32-1 concurrent streams, and keep connections with no call forever.
    "grpc.max_concurrent_streams": config.maxStreamsPerConnection,
    "grpc.max_connection_idle_ms": config.connectionIdleTimeoutMs,
  };
  if (config.maxConnectionAgeMs > 0) {
    options["grpc.max_connection_age_ms"] = config.maxConnectionAgeMs;
    options["grpc.max_connection_age_grace_ms"] = config.maxConnectionAgeGraceMs;
  }
  const server = new grpc.Server(options);
  const health = new Health([QueueService.typeName, CronService.typeName], config.maxHealthWatches);
  const lease = {
    clock: cron.clock,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    openTimeoutMs: config.leaseOpenTimeoutMs,
    maxCredit: config.maxCredit,
    buffers,
    maxMessageBytes: config.maxMessageBytes,
  };
  server.addService(serviceDefinition(QueueService), queueServiceHandlers(queues, log, lease));
  server.addService(serviceDefinition(CronService), cronServiceHandlers(cron, log));
  if (audit) server.addService(serviceDefinition(AuditService), auditServiceHandlers(audit, log));
  server.addService(serviceDefinition(AuthService), authServiceHandlers(config.auth.enabled, log));
  server.addService(serviceDefinition(HealthDesc), health.handlers());
  const reflectionNames = [ServerReflection.typeName, "grpc.reflection.v1alpha.ServerReflection"];
  const served = [
    QueueService.typeName, CronService.typeName, ...(audit ? [AuditService.typeName] : []), AuthService.typeName, HealthDesc.typeName, ...reflectionNames,
  ];
  const reflection = reflectionHandlers([...apiFiles, ServerReflection.file], served);
  for (const name of reflectionNames) server.addService(serviceDefinition(ServerReflection, name), reflection);
  return { server, health };
}

/** Binds `address` ("host:port"; port 0 picks one) and resolves to the bound port. */
export function bind(
  server: grpc.Server,
  address: string,
  credentials: grpc.ServerCredentials = grpc.ServerCredentials.createInsecure(),
): Promise<number> {
  return new Promise((ok, fail) => server.bindAsync(address, credentials, (err, port) => (err ? fail(err) : ok(port))));
}
