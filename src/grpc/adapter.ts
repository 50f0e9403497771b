/**
 * The one bridge between protobuf-es service descriptors and @grpc/grpc-js:
 * the same definitions serve the server and build the typed client.
 */
import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { EnqueueRequestSchema, EnqueueResponseSchema, EnqueueStreamResponseSchema, LeaseRequestSchema, LeaseResponseSchema, QueueService } from "../gen/switchyard/v1/queue_pb.js";
import {
  decodeEnqueueRequest,
  decodeEnqueueResponse,
  decodeEnqueueStreamResponse,
  encodeEnqueueRequest,
  encodeEnqueueResponse,
  readEnqueueRequest,
  readEnqueueStreamRequest,
} from "./enqueue-wire.js";
import { decodeLeaseRequest, decodeLeaseResponse } from "./lease-wire.js";

/**
 * What the deserializer hands on instead of throwing: grpc-js would turn a
 * thrown error into INTERNAL, but malformed input is the caller's mistake.
 */
export class MalformedMessage {
  constructor(
    readonly typeName: string,
    readonly reason: string,
  ) {}
}

/**
 * A message already in its wire form, which the serializer sends as it is: for
 * hot paths that write their bytes by hand (see delivery-wire.ts).
 */
export class PreEncoded {
  constructor(readonly bytes: Buffer) {}
}

/** How one message type goes to and from the wire. */
interface Codec {
  encode(message: never): Uint8Array;
  decode(bytes: Uint8Array): unknown;
}

/**
 * Codecs written by hand for the messages of hot paths (see enqueue-wire.ts, lease-wire.ts),
 * used wherever those messages are sent or read, in place of protobuf-es'
 * generic toBinary and fromBinary: they write the same bytes, and accept and
 * return the same messages.
 */
const handWritten = new Map<string, Codec>([
  [EnqueueRequestSchema.typeName, { encode: encodeEnqueueRequest, decode: decodeEnqueueRequest }],
  [EnqueueResponseSchema.typeName, { encode: encodeEnqueueResponse, decode: decodeEnqueueResponse }],
  [EnqueueStreamResponseSchema.typeName, { encode: (m) => toBinary(EnqueueStreamResponseSchema, m), decode: decodeEnqueueStreamResponse }],
  // The server writes deliveries by hand (delivery-wire.ts) and other kinds with toBinary; the client reads them here.
  [LeaseResponseSchema.typeName, { encode: (m) => toBinary(LeaseResponseSchema, m), decode: decodeLeaseResponse }],
  // The client writes ack batches by hand (lease-wire.ts) and other kinds through the codec; the server reads them here.
  [LeaseRequestSchema.typeName, { encode: (m) => toBinary(LeaseRequestSchema, m), decode: decodeLeaseRequest }],
]);

function codec(schema: DescMessage): Codec {
  return handWritten.get(schema.typeName) ?? { encode: (message) => toBinary(schema, message), decode: (bytes) => fromBinary(schema, bytes) };
}

/**
 * Methods whose handlers take their request in another form than the
 * protobuf-es message, by full method name: Enqueue's items stay packed in
 * the request's bytes (EnqueueCall, EnqueueStreamCall: enqueue-wire.ts).
 */
const requestReaders = new Map<string, (bytes: Uint8Array) => unknown>([
  [`${QueueService.typeName}.Enqueue`, readEnqueueRequest],
  [`${QueueService.typeName}.EnqueueStream`, readEnqueueStreamRequest],
]);

function serializer(schema: DescMessage) {
  const { encode } = codec(schema);
  return (message: unknown): Buffer => {
    if (message instanceof PreEncoded) return message.bytes;
    const bytes = encode(message as never);
    return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function lenientDeserializer(schema: DescMessage, decode = codec(schema).decode) {
  return (bytes: Buffer): unknown => {
    try {
      return decode(bytes);
    } catch (err) {
      return new MalformedMessage(schema.typeName, err instanceof Error ? err.message : String(err));
    }
  };
}

function strictDeserializer(schema: DescMessage) {
  const { decode } = codec(schema);
  return (bytes: Buffer): unknown => decode(bytes);
}

function methodDefinition(method: DescMethod, typeName: string): grpc.MethodDefinition<unknown, unknown> {
  return {
    path: `/${typeName}/${method.name}`,
    originalName: method.localName,
    requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
    responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
    requestSerialize: serializer(method.input),
    requestDeserialize: lenientDeserializer(method.input, requestReaders.get(`${method.parent.typeName}.${method.name}`)),
    responseSerialize: serializer(method.output),
    responseDeserialize: strictDeserializer(method.output),
  };
}

/**
 * A grpc-js service definition for a protobuf-es service, keyed by the
 * methods' local (camelCase) names. `typeName` serves the same schema under
 * another full name (reflection's v1alpha alias).
 */
export function serviceDefinition(
  service: DescService,
  typeName: string = service.typeName,
): grpc.ServiceDefinition {
  const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const method of service.methods) definition[method.localName] = methodDefinition(method, typeName);
  return definition;
}

/** A grpc-js client constructor whose methods are the service's local names. */
export function clientConstructor(service: DescService): grpc.ServiceClientConstructor {
  return grpc.makeGenericClientConstructor(serviceDefinition(service), service.typeName);
}
