#!/usr/bin/env node
/**
 * The `switchyard` command (package.json "bin"). `serve` runs the service
 * (main.ts); every other command is a client of a running one (run.ts),
 * imported only then, so `serve` loads grpc-js after any OpenTelemetry preload.
 */
import { createInterface } from "node:readline";

async function readLines(): Promise<string[]> {
  const lines: string[] = [];
  for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) if (line !== "") lines.push(line);
  return lines;
}

async function cli(argv: string[]): Promise<void> {
  if (argv[0] === "serve") {
    if (argv.length > 1) {
      process.stderr.write("switchyard: serve takes no arguments; it is configured by SWITCHYARD_* environment variables (see README)\n");
      process.exit(2);
    }
    await import("../main.js");
    return;
  }
  const { run } = await import("./run.js");
  const io = { out: (t: string) => void process.stdout.write(t), err: (t: string) => void process.stderr.write(t) };
  process.exitCode = await run(argv, process.env, io, readLines);
}

void cli(process.argv.slice(2));
