/** The shape of a `switchyard` subcommand. */
import type { SwitchyardClient } from "../client/client.js";
import type { Globals, OptionSpecs } from "./args.js";
import type { Output } from "./format.js";

/** What a command gets: its arguments after the command words, the connection settings, and where to print. */
export interface CommandContext {
  argv: string[];
  globals: Globals;
  io: Output;
  /** A client of the server; `metadata` goes with every call it makes (e.g. traceparent). */
  connect(metadata?: Record<string, string>): SwitchyardClient;
  /** Lines of standard input (read only by `queue enqueue -`). */
  stdinLines(): Promise<string[]>;
}

/** A command: its options, a one-line usage, and its body. */
export interface Command {
  usage: string;
  options: OptionSpecs;
  run(ctx: CommandContext): Promise<void>;
}
