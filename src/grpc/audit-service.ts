/** gRPC handlers of switchyard.v1.AuditService: reads the audit log. */
import type * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { AuditLogSchema, ListAuditLogsResponseSchema, type ListAuditLogsRequest } from "../gen/switchyard/v1/audit_pb.js";
import type { Logger } from "../log.js";
import type { AuditEntry, AuditLogStore } from "../auth/audit-log.js";
import { msTimestamp } from "./convert.js";
import { unary } from "./status.js";

function auditLogMessage(e: AuditEntry) {
  return create(AuditLogSchema, {
    id: e.id,
    time: msTimestamp(e.timeMs),
    actor: e.actor,
    method: e.method,
    target: e.target,
    detail: e.detail,
    code: e.code,
    message: e.message,
    peer: e.peer,
    instanceId: e.instanceId,
  });
}

/** The AuditService implementation for grpc-js. */
export function auditServiceHandlers(audit: AuditLogStore, log: Logger): grpc.UntypedServiceImplementation {
  return {
    listAuditLogs: unary(log, "ListAuditLogs", async (req: ListAuditLogsRequest) => {
      const page = await audit.list(req.pageSize, req.pageToken);
      return create(ListAuditLogsResponseSchema, { logs: page.logs.map(auditLogMessage), nextPageToken: page.nextPageToken });
    }),
  };
}
