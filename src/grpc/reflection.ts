/**
 * gRPC server reflection (v1 and v1alpha), answered from protobuf-es file
 * descriptors. Every file comes with its transitive imports (such as
 * google/protobuf/duration.proto), which `buf curl` needs to build requests.
 */
import * as grpc from "@grpc/grpc-js";
import { clone, create, toBinary, type DescFile, type MessageInitShape } from "@bufbuild/protobuf";
import { type DescriptorProto, type FileDescriptorProto, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  type ServerReflectionRequest,
  type ServerReflectionResponse,
  ServerReflectionResponseSchema,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import { MalformedMessage } from "./adapter.js";

function withImports(file: DescFile, into: Map<string, FileDescriptorProto>): void {
  if (into.has(file.proto.name)) return;
  into.set(file.proto.name, file.proto);
  for (const dep of file.dependencies) withImports(dep, into);
}

/** Every symbol a file defines: messages, enums (nested too), services and methods. */
function symbolsOf(file: FileDescriptorProto): string[] {
  const prefix = file.package ? `${file.package}.` : "";
  const names: string[] = [];
  const visitMessage = (m: DescriptorProto, scope: string) => {
    const name = `${scope}${m.name}`;
    names.push(name);
    m.enumType.forEach((e) => names.push(`${name}.${e.name}`));
    m.nestedType.forEach((n) => visitMessage(n, `${name}.`));
  };
  file.messageType.forEach((m) => visitMessage(m, prefix));
  file.enumType.forEach((e) => names.push(`${prefix}${e.name}`));
  for (const s of file.service) {
    names.push(`${prefix}${s.name}`);
    s.method.forEach((m) => names.push(`${prefix}${s.name}.${m.name}`));
  }
  return names;
}

const packageOf = (typeName: string) => typeName.slice(0, Math.max(0, typeName.lastIndexOf(".")));
const simpleName = (typeName: string) => typeName.slice(typeName.lastIndexOf(".") + 1);

/**
 * A copy of `file` moved to package `to`: the descriptor of a schema that the
 * server also serves under another full name (reflection's v1alpha alias of
 * v1). Type references into the old package are rewritten; imports stay.
 */
function aliasFile(file: FileDescriptorProto, to: string): FileDescriptorProto {
  const from = file.package;
  const alias = clone(FileDescriptorProtoSchema, file);
  const rename = (typeName: string) => (typeName.startsWith(`.${from}.`) ? `.${to}.${typeName.slice(from.length + 2)}` : typeName);
  const visitMessage = (m: DescriptorProto) => {
    for (const f of [...m.field, ...m.extension]) f.typeName = rename(f.typeName);
    m.nestedType.forEach(visitMessage);
  };
  alias.messageType.forEach(visitMessage);
  for (const s of alias.service) {
    for (const m of s.method) {
      m.inputType = rename(m.inputType);
      m.outputType = rename(m.outputType);
    }
  }
  alias.package = to;
  const base = file.name.slice(file.name.lastIndexOf("/") + 1);
  alias.name = `${to.replace(/\./g, "/")}/${base}`;
  alias.options = undefined; // Language options (go_package, java_package...) name the original package.
  return alias;
}

/**
 * Handlers for grpc.reflection.v1(alpha).ServerReflection over `files` and
 * their imports. Every name in `services` must be described: one that `files`
 * do not define is served as an alias of the described service with the same
 * simple name (the same schema registered under another full name).
 */
export function reflectionHandlers(files: DescFile[], services: string[]): grpc.UntypedServiceImplementation {
  const byName = new Map<string, FileDescriptorProto>();
  for (const f of files) withImports(f, byName);
  const bySymbol = new Map<string, FileDescriptorProto>();
  const index = (file: FileDescriptorProto) => {
    byName.set(file.name, file);
    for (const s of symbolsOf(file)) bySymbol.set(s, file);
  };
  [...byName.values()].forEach(index);
  const described = [...byName.values()].flatMap((file) => file.service.map((s) => ({ name: s.name, file })));
  for (const service of services) {
    if (bySymbol.has(service)) continue;
    const original = described.find((d) => d.name === simpleName(service));
    if (!original) throw new Error(`reflection: no descriptor for service ${service}`);
    const alias = aliasFile(original.file, packageOf(service));
    if (byName.has(alias.name)) throw new Error(`reflection: alias file ${alias.name} clashes with a served file`);
    index(alias);
  }
  const encoded = (file: FileDescriptorProto) => {
    const all = new Map<string, FileDescriptorProto>();
    const visit = (f: FileDescriptorProto) => {
      if (all.has(f.name)) return;
      all.set(f.name, f);
      for (const dep of f.dependency) {
        const d = byName.get(dep);
        if (d) visit(d);
      }
    };
    visit(file);
    return [...all.values()].map((f) => toBinary(FileDescriptorProtoSchema, f));
  };

  type Answer = MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"];
  const notFound = (what: string): Answer => ({
    case: "errorResponse",
    value: { errorCode: grpc.status.NOT_FOUND, errorMessage: `${what} not found` },
  });
  const withFile = (file: FileDescriptorProto): Answer => ({ case: "fileDescriptorResponse", value: { fileDescriptorProto: encoded(file) } });
  const answer = (req: ServerReflectionRequest): Answer => {
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: services.map((name) => ({ name })) } };
      case "fileByFilename": {
        const file = byName.get(r.value);
        return file ? withFile(file) : notFound(`file ${r.value}`);
      }
      case "fileContainingSymbol": {
        const file = bySymbol.get(r.value.replace(/^\./, ""));
        return file ? withFile(file) : notFound(`symbol ${r.value}`);
      }
      case "fileContainingExtension":
        return notFound(`extension ${r.value.containingType}(${r.value.extensionNumber})`);
      case "allExtensionNumbersOfType":
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value, extensionNumber: [] } };
      default:
        return { case: "errorResponse", value: { errorCode: grpc.status.INVALID_ARGUMENT, errorMessage: "empty request" } };
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
          create(ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: answer(req) }),
        );
      });
      call.on("end", () => call.end());
    },
  };
}
