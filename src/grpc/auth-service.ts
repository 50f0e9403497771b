/** gRPC handlers of switchyard.v1.AuthService: the caller as the auth interceptor identified it. */
import type * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { GetCallerResponseSchema } from "../gen/switchyard/v1/auth_pb.js";
import type { Logger } from "../log.js";
import { callerOf } from "./auth-interceptor.js";
import { unary } from "./status.js";

/** The AuthService implementation for grpc-js; `authEnabled` as the server runs. */
export function authServiceHandlers(authEnabled: boolean, log: Logger): grpc.UntypedServiceImplementation {
  return {
    getCaller: unary(log, "GetCaller", async (_req: unknown, call) => {
      const caller = callerOf(call.metadata);
      return create(GetCallerResponseSchema, { name: caller.name, scopes: caller.grants.grants.map((g) => g.text), authEnabled });
    }),
  };
}
