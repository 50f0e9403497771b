/**
 * gRPC server reflection (v1 and v1alpha), answered from protobuf-es file
 * descriptors. Every file comes with its transitive imports (such as
 * google/protobuf/duration.proto), which `buf curl` needs to build requests.
 */
import * as grpc from "@grpc/grpc-js";
import { create, toBinary, type DescFile } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  type ServerReflectionRequest,
  type ServerReflectionResponse,
  ServerReflectionResponseSchema,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import { MalformedMessage } from "./adapter.js";

function withImports(file: DescFile, into: Map<string, DescFile>): void {
  if (into.has(file.proto.name)) return;
  into.set(file.proto.name, file);
  for (const dep of file.dependencies) withImports(dep, into);
}

function symbolsOf(file: DescFile): string[] {
  const names: string[] = [];
  const visitMessage = (m: DescFile["messages"][number]) => {
    names.push(m.typeName);
    m.nestedEnums.forEach((e) => names.push(e.typeName));
    m.nestedMessages.forEach(visitMessage);
  };
  file.messages.forEach(visitMessage);
  file.enums.forEach((e) => names.push(e.typeName));
  for (const s of file.services) {
    names.push(s.typeName);
    s.methods.forEach((m) => names.push(`${s.typeName}.${m.name}`));
  }
  return names;
}

/** Handlers for grpc.reflection.v1(alpha).ServerReflection over `files` and their imports. */
export function reflectionHandlers(files: DescFile[], services: string[]): grpc.UntypedServiceImplementation {
  const byName = new Map<string, DescFile>();
  for (const f of files) withImports(f, byName);
  const bySymbol = new Map<string, DescFile>();
  for (const f of byName.values()) for (const s of symbolsOf(f)) bySymbol.set(s, f);
  const encoded = (file: DescFile) => {
    const all = new Map<string, DescFile>();
    withImports(file, all);
    return [...all.values()].map((f) => toBinary(FileDescriptorProtoSchema, f.proto));
  };

  const answer = (req: ServerReflectionRequest): ServerReflectionResponse["messageResponse"] => {
    const notFound = (what: string) =>
      ({ case: "errorResponse", value: { errorCode: grpc.status.NOT_FOUND, errorMessage: `${what} not found` } }) as const;
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: services.map((name) => ({ name })) } } as never;
      case "fileByFilename": {
        const file = byName.get(r.value);
        return file ? ({ case: "fileDescriptorResponse", value: { fileDescriptorProto: encoded(file) } } as never) : (notFound(`file ${r.value}`) as never);
      }
      case "fileContainingSymbol": {
        const file = bySymbol.get(r.value.replace(/^\./, ""));
        return file ? ({ case: "fileDescriptorResponse", value: { fileDescriptorProto: encoded(file) } } as never) : (notFound(`symbol ${r.value}`) as never);
      }
      case "fileContainingExtension":
        return notFound(`extension ${r.value.containingType}(${r.value.extensionNumber})`) as never;
      case "allExtensionNumbersOfType":
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value, extensionNumber: [] } } as never;
      default:
        return { case: "errorResponse", value: { errorCode: grpc.status.INVALID_ARGUMENT, errorMessage: "empty request" } } as never;
    }
  };

  return {
    serverReflectionInfo: (call: grpc.ServerDuplexStream<ServerReflectionRequest | MalformedMessage, ServerReflectionResponse>) => {
      call.on("data", (req: ServerReflectionRequest | MalformedMessage) => {
        if (req instanceof MalformedMessage) {
          call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: `malformed ${req.typeName}` });
          return;
        }
        call.write(
          create(ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: answer(req) as never }),
        );
      });
      call.on("end", () => call.end());
    },
  };
}
