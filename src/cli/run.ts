/**
 * The `switchyard` command line, minus `serve` (see main.ts): finds the
 * command, connects with the TypeScript client, prints, and maps failures to
 * exit statuses: 0 done, 1 the call failed (gRPC status on stderr), 2 usage.
 */
import * as grpc from "@grpc/grpc-js";
import { SwitchyardClient } from "../client/client.js";
import { readFileSync } from "node:fs";
import { UsageError, globalsOf, parse, type TlsFlags } from "./args.js";
import type { Command } from "./command.js";
import { cronCommands } from "./cron-commands.js";
import type { Output } from "./format.js";
import { queueCommands } from "./queue-commands.js";

const groups: Record<string, Record<string, Command>> = { queue: queueCommands, cron: cronCommands };

/** The whole usage text. */
export function usage(): string {
  const lines = [
    "usage: switchyard <command> [options]",
    "",
    "  serve                 run the service (configured by SWITCHYARD_* environment variables; see README)",
  ];
  for (const group of Object.values(groups)) for (const c of Object.values(group)) lines.push(`  ${c.usage}`);
  lines.push(
    "",
    "options of every command but serve:",
    "  --address HOST:PORT   the server (default $SWITCHYARD_ADDRESS or 127.0.0.1:50051)",
    "  --token TOKEN         a bearer token (default $SWITCHYARD_TOKEN)",
    "  --json                print JSON (protobuf JSON field names) instead of tables",
    "  --timeout D           deadline of each call (default 30s)",
    "  --tls                 connect with TLS, trusting the system's CAs (implied by the options below)",
    "  --ca-file PEM         trust this CA (the server's certificate chains to it)",
    "  --cert-file PEM --key-file PEM",
    "                        present this client certificate (mutual TLS)",
    "  --server-name NAME    check the server's certificate for NAME instead of the address's host",
    "",
  );
  return lines.join("\n");
}

function pem(flag: string, path: string | undefined): Buffer | null {
  if (path === undefined) return null;
  try {
    return readFileSync(path);
  } catch (err) {
    throw new UsageError(`${flag}: cannot read "${path}": ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Channel credentials and options for the TLS flags; plaintext without them. */
function transport(tls: TlsFlags | undefined): { credentials?: grpc.ChannelCredentials; options: grpc.ChannelOptions } {
  if (!tls) return { options: {} };
  const credentials = grpc.credentials.createSsl(pem("--ca-file", tls.caFile), pem("--key-file", tls.keyFile), pem("--cert-file", tls.certFile));
  const options: grpc.ChannelOptions = tls.serverName
    ? { "grpc.ssl_target_name_override": tls.serverName, "grpc.default_authority": tls.serverName }
    : {};
  return { credentials, options };
}

/** A client interceptor that adds fixed metadata to every call. */
function withMetadata(extra: Record<string, string>): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start: (metadata, listener, next) => {
        for (const [k, v] of Object.entries(extra)) metadata.set(k, v);
        next(metadata, listener);
      },
    });
}

function describeFailure(err: unknown): string {
  const e = err as Partial<grpc.ServiceError>;
  if (typeof e.code === "number" && typeof e.details === "string") return `${grpc.status[e.code] ?? e.code}: ${e.details}`;
  return err instanceof Error ? err.message : String(err);
}

/** Runs one command line (`argv` without node and the script); resolves to the exit status. */
export async function run(argv: string[], env: NodeJS.ProcessEnv, io: Output, stdinLines: () => Promise<string[]>): Promise<number> {
  const [groupName, commandName, ...rest] = argv;
  const group = groups[groupName ?? ""];
  const command = group?.[commandName ?? ""];
  if (!command) {
    const wantsHelp = argv.length === 0 || ["help", "--help", "-h"].includes(groupName!);
    (wantsHelp ? io.out : io.err)(usage());
    if (!wantsHelp) io.err(`switchyard: unknown command "${argv.slice(0, group ? 2 : 1).join(" ")}"\n`);
    return wantsHelp ? 0 : 2;
  }
  const clients: SwitchyardClient[] = [];
  try {
    const { values } = parse(rest, command.options);
    if (values.help === true) {
      io.out(`usage: switchyard ${command.usage}\n`);
      return 0;
    }
    const globals = globalsOf(values, env);
    const { credentials, options } = transport(globals.tls);
    const connect = (metadata?: Record<string, string>) => {
      const client = new SwitchyardClient(globals.address, {
        token: globals.token,
        timeoutMs: globals.timeoutMs,
        credentials,
        channelOptions: metadata ? { ...options, interceptors: [withMetadata(metadata)] } : options,
      });
      clients.push(client);
      return client;
    };
    await command.run({ argv: rest, globals, io, connect, stdinLines });
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`switchyard: ${err.message}\nusage: switchyard ${command.usage}\n`);
      return 2;
    }
    io.err(`switchyard: ${describeFailure(err)}\n`);
    return 1;
  } finally {
    for (const c of clients) c.close();
  }
}
