/**
 * A Lease call over plain HTTP/2 (node:http2), for workers no gRPC library
 * would make: one that never reads what the server sends (its stream window
 * stays closed), or one that never sends open.
 */
import { connect, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { LeaseRequestSchema } from "../../src/gen/switchyard/v1/queue_pb.js";

/** One raw Lease call on a connection of its own. */
export interface RawLease {
  readonly session: ClientHttp2Session;
  readonly stream: ClientHttp2Stream;
  /** The call's grpc-status once trailers came, else undefined. */
  status(): string | undefined;
  /** Sends one LeaseRequest. */
  send(kind: MessageInitShape<typeof LeaseRequestSchema>["kind"]): void;
  close(): void;
}

/** Opens a Lease call to `address`; with `read: false` it never reads a byte of the response. */
export function rawLease(address: string, options: { read: boolean }): RawLease {
  const session = connect(`http://${address}`);
  session.on("error", () => undefined);
  const stream = session.request({
    ":method": "POST",
    ":path": "/switchyard.v1.QueueService/Lease",
    "content-type": "application/grpc",
    te: "trailers",
  });
  stream.on("error", () => undefined);
  let status: string | undefined;
  stream.on("trailers", (trailers) => (status = String(trailers["grpc-status"])));
  stream.on("response", (headers) => {
    if (headers["grpc-status"] !== undefined) status = String(headers["grpc-status"]); // trailers-only
  });
  if (options.read) stream.resume();
  else stream.pause();
  return {
    session,
    stream,
    status: () => status,
    send(kind) {
      const message = toBinary(LeaseRequestSchema, create(LeaseRequestSchema, { kind }));
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      frame.set(message, 5);
      stream.write(frame);
    },
    close: () => session.destroy(),
  };
}
