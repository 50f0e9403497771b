/**
 * The one bridge between protobuf-es service descriptors and @grpc/grpc-js:
 * the same definitions serve the server and build the typed client.
 */
import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";

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

function serializer(schema: DescMessage) {
  return (message: unknown): Buffer => {
    if (message instanceof PreEncoded) return message.bytes;
    const bytes = toBinary(schema, message as never);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function lenientDeserializer(schema: DescMessage) {
  return (bytes: Buffer): unknown => {
    try {
      return fromBinary(schema, bytes);
    } catch (err) {
      return new MalformedMessage(schema.typeName, err instanceof Error ? err.message : String(err));
    }
  };
}

function strictDeserializer(schema: DescMessage) {
  return (bytes: Buffer): unknown => fromBinary(schema, bytes);
}

function methodDefinition(method: DescMethod, typeName: string): grpc.MethodDefinition<unknown, unknown> {
  return {
    path: `/${typeName}/${method.name}`,
    originalName: method.localName,
    requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
    responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
    requestSerialize: serializer(method.input),
    requestDeserialize: lenientDeserializer(method.input),
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
