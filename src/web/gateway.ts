/**
 * The web API: the Connect and gRPC-web protocols for the same protobuf
 * services, served on the side HTTP port under /api so a browser can call them
 * with generated TypeScript (the dashboard does). There is no second API: each
 * call is forwarded to this instance's own gRPC server over a private unix
 * socket with the caller's authorization metadata, so it passes the same
 * interceptors (authentication, scopes, audit, metrics, logs) and handlers as
 * every other client, and fails with the same status and message.
 *
 * Unary methods only: Lease and EnqueueStream are bidirectional streams, for gRPC clients.
 */
import * as grpc from "@grpc/grpc-js";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import { clientConstructor } from "../grpc/adapter.js";

/** Where the web API is served. */
export const API_PREFIX = "/api";

/** Request headers handed on to the gRPC call as metadata. */
const FORWARDED = ["authorization", "traceparent", "tracestate", "x-request-id"];

/** A node:http handler for the web API, and how to close its gRPC channel. */
export interface WebApi {
  handle(req: IncomingMessage, res: ServerResponse): void;
  close(): void;
}

type UnaryCall = (
  request: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, response: unknown) => void,
) => grpc.ClientUnaryCall;

function metadataOf(headers: Headers): grpc.Metadata {
  const metadata = new grpc.Metadata();
  for (const name of FORWARDED) {
    const value = headers.get(name);
    if (value !== null) metadata.set(name, value);
  }
  return metadata;
}

/** Forwards one unary call; the gRPC status becomes the Connect error with the same code and message. */
function forward(call: UnaryCall, request: unknown, ctx: HandlerContext): Promise<unknown> {
  return new Promise((ok, fail) => {
    const timeoutMs = ctx.timeoutMs();
    const options: grpc.CallOptions = timeoutMs === undefined ? {} : { deadline: Date.now() + timeoutMs };
    const pending = call(request, metadataOf(ctx.requestHeader), options, (err, response) => {
      ctx.signal.removeEventListener("abort", cancel);
      if (!err) return ok(response);
      fail(new ConnectError(err.details || err.message, err.code in Code ? (err.code as number as Code) : Code.Unknown));
    });
    const cancel = () => pending.cancel();
    ctx.signal.addEventListener("abort", cancel);
  });
}

/**
 * Serves `services` under /api, forwarding to the gRPC server at `target`
 * (e.g. "unix:/tmp/switchyard-x/grpc.sock"); requests over `maxBytes` are refused.
 */
export function webApi(target: string, services: readonly DescService[], maxBytes: number): WebApi {
  const clients: grpc.Client[] = [];
  const routes = (router: ConnectRouter) => {
    for (const service of services) {
      const client = new (clientConstructor(service))(target, grpc.credentials.createInsecure(), {
        "grpc.max_receive_message_length": maxBytes,
        "grpc.max_send_message_length": maxBytes,
      });
      clients.push(client);
      const calls = client as unknown as Record<string, UnaryCall>;
      const impl: Record<string, (request: unknown, ctx: HandlerContext) => Promise<unknown>> = {};
      for (const method of service.methods) {
        if (method.methodKind !== "unary") continue;
        const call = calls[method.localName].bind(client) as UnaryCall;
        impl[method.localName] = (request, ctx) => forward(call, request, ctx);
      }
      router.service(service, impl as never);
    }
  };
  const handler = connectNodeAdapter({ routes, requestPathPrefix: API_PREFIX, readMaxBytes: maxBytes, grpc: false });
  return {
    handle: (req, res) => handler(req, res),
    close: () => clients.forEach((c) => c.close()),
  };
}
