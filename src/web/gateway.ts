/**
 * The web API: the Connect and gRPC-web protocols for the same protobuf
 * services, served on the side HTTP port under /api so a browser can call them
 * with generated TypeScript (the dashboard does). There is no second API: each
 * call is forwarded to this instance's own gRPC server over a private unix
 * socket with the caller's authorization metadata, so it passes the same
 * interceptors (authentication, scopes, audit, metrics, logs) and handlers as
 * every other client, and fails with the same status, message and error
 * details (google.rpc.ErrorInfo, BadRequest: Connect's error details).
 *
 * Before a body is read, the caller's token is checked (a request without a
 * known one is refused at once: its body is never read) and the body's
 * announced size: an unauthenticated caller cannot make the instance hold
 * large bodies. Scopes are checked later, by the gRPC server, as for any call.
 *
 * Unary methods only: Lease and EnqueueStream are bidirectional streams, for gRPC clients.
 */
import * as grpc from "@grpc/grpc-js";
import { fromBinary, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import { clientConstructor } from "../grpc/adapter.js";
import type { Authenticator } from "../auth/authenticator.js";
import { SwitchyardError } from "../errors.js";
import { StatusSchema } from "../gen/google/rpc/status_pb.js";
import { STATUS_DETAILS_KEY } from "../wire/status-details.js";

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

/** The details of a gRPC error's google.rpc.Status, as Connect's error details (type name and bytes). */
function detailsOf(err: grpc.ServiceError): { type: string; value: Uint8Array }[] {
  const [bytes] = err.metadata?.get(STATUS_DETAILS_KEY) ?? [];
  if (!(bytes instanceof Uint8Array)) return [];
  try {
    return fromBinary(StatusSchema, bytes).details.map((any) => ({ type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1), value: any.value }));
  } catch {
    return [];
  }
}

/** Forwards one unary call; the gRPC status becomes the Connect error with the same code, message and details. */
function forward(call: UnaryCall, request: unknown, ctx: HandlerContext): Promise<unknown> {
  return new Promise((ok, fail) => {
    const timeoutMs = ctx.timeoutMs();
    const options: grpc.CallOptions = timeoutMs === undefined ? {} : { deadline: Date.now() + timeoutMs };
    const pending = call(request, metadataOf(ctx.requestHeader), options, (err, response) => {
      ctx.signal.removeEventListener("abort", cancel);
      if (!err) return ok(response);
      const error = new ConnectError(err.details || err.message, err.code in Code ? (err.code as number as Code) : Code.Unknown);
      error.details.push(...detailsOf(err));
      fail(error);
    });
    const cancel = () => pending.cancel();
    ctx.signal.addEventListener("abort", cancel);
  });
}

/** Limits and credentials of the web API. */
export interface WebApiOptions {
  /** Largest gRPC message to and from the server. */
  maxMessageBytes: number;
  /** Largest request body read. */
  maxBodyBytes: number;
  /** Names callers from their `authorization` header before their body is read. */
  authenticator: Authenticator;
}

/** Answers a Connect error (JSON) without reading the request's body, and closes the connection rather than read it. */
function refuse(res: ServerResponse, status: number, code: string, message: string): void {
  res.writeHead(status, { "content-type": "application/json", connection: "close", "cache-control": "no-store" });
  res.end(JSON.stringify({ code, message }));
}

/** Why a request may not be read (unauthenticated, too large), or undefined. */
function refusal(req: IncomingMessage, options: WebApiOptions): [number, string, string] | undefined {
  const authorization = req.headers.authorization;
  try {
    options.authenticator.authenticate(authorization === undefined ? [] : [authorization], undefined);
  } catch (err) {
    if (err instanceof SwitchyardError) return [401, "unauthenticated", err.message];
    throw err;
  }
  const length = Number(req.headers["content-length"] ?? 0);
  if (length > options.maxBodyBytes) {
    return [413, "resource_exhausted", `a request body of ${length} bytes; the web API reads at most ${options.maxBodyBytes} (SWITCHYARD_HTTP_MAX_BODY_BYTES)`];
  }
  return undefined;
}

/**
 * Serves `services` under /api, forwarding to the gRPC server at `target`
 * (e.g. "unix:/tmp/switchyard-x/grpc.sock").
 */
export function webApi(target: string, services: readonly DescService[], options: WebApiOptions): WebApi {
  const maxBytes = options.maxMessageBytes;
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
  // A body sent without a length (chunked) is cut off at the limit as it is read.
  const handler = connectNodeAdapter({ routes, requestPathPrefix: API_PREFIX, readMaxBytes: options.maxBodyBytes, grpc: false });
  return {
    handle: (req, res) => {
      const refused = refusal(req, options);
      if (refused) refuse(res, ...refused);
      else handler(req, res);
    },
    close: () => clients.forEach((c) => c.close()),
  };
}
