/**
 * Runs redis-server as a child process on a unix socket (so no port can
 * clash), with its data kept in a local folder.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createConnection } from "node:net";
import { resolve } from "node:path";
import { SwitchyardError } from "../errors.js";

/** A running redis-server child. */
export interface EmbeddedRedis {
  readonly socketPath: string;
  readonly dir: string;
  readonly process: ChildProcess;
  /** Stops the server (SIGTERM, so it flushes its append-only file) and waits for it. */
  stop(): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would. */
  kill(): Promise<void>;
}

/** Options for {@link startEmbeddedRedis}. */
export interface EmbeddedOptions {
  dir: string;
  binary?: string;
  appendOnly?: boolean;
  /** Also listen on this loopback TCP port (0: no TCP). */
  port?: number;
  extraArgs?: string[];
}

const missingBinaryHelp = (binary: string) =>
  `cannot start the embedded Redis: "${binary}" was not found. Install it ` +
  `(Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis), ` +
  `set SWITCHYARD_REDIS_SERVER_BIN to its path, or point Switchyard at a Redis ` +
  `with SWITCHYARD_REDIS_URL=redis://host:6379 (or SWITCHYARD_REDIS_CLUSTER_NODES=host:port,...)`;

/**
 * True once the server answers a PING on its socket (any reply: a loading server's error counts). A
 * socket that only accepts is not enough: Redis listens before it has finished starting, and may still
 * abort (a Cluster node whose bus port is taken exits after its socket accepted connections).
 */
function answers(path: string): Promise<boolean> {
  return new Promise((ok) => {
    const socket = createConnection({ path }, () => socket.write("PING\r\n"));
    const done = (answered: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      ok(answered);
    };
    const timer = setTimeout(() => done(false), 250);
    socket.once("data", () => done(true));
    socket.on("error", () => done(false));
    socket.on("close", () => done(false));
  });
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => child.once("exit", () => ok()));
}

/** Starts redis-server and resolves once it accepts connections on its socket. */
export async function startEmbeddedRedis(options: EmbeddedOptions): Promise<EmbeddedRedis> {
  const dir = resolve(options.dir);
  const binary = options.binary ?? "redis-server";
  mkdirSync(dir, { recursive: true });
  const socketPath = resolve(dir, "redis.sock");
  const args = [
    "--port", String(options.port ?? 0),
    "--bind", "127.0.0.1",
    "--unixsocket", socketPath,
    "--unixsocketperm", "700",
    "--dir", dir,
    "--save", "",
    "--appendonly", options.appendOnly === false ? "no" : "yes",
    "--appendfsync", "everysec",
    "--daemonize", "no",
    "--logfile", resolve(dir, "redis.log"),
    ...(options.extraArgs ?? []),
  ];
  // Its own process group: a Ctrl-C in the terminal must not stop Redis while
  // Switchyard is still returning held items to it on the way out.
  const child = spawn(binary, args, { stdio: "ignore", detached: true });
  const unreachable = { reason: "REDIS_UNAVAILABLE" } as const;
  const spawnError = new Promise<never>((_, fail) => {
    child.once("error", (err: NodeJS.ErrnoException) =>
      fail(err.code === "ENOENT" ? new SwitchyardError("unavailable", missingBinaryHelp(binary), unreachable) : err),
    );
    child.once("exit", (code) =>
      fail(new SwitchyardError("unavailable", `embedded redis-server exited with code ${code}; see ${dir}/redis.log`, unreachable)),
    );
  });
  const started = (async () => {
    for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
      if (await answers(socketPath)) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new SwitchyardError("unavailable", `embedded redis-server did not start in 5 s; see ${dir}/redis.log`, unreachable);
  })();
  try {
    await Promise.race([started, spawnError]);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  spawnError.catch(() => undefined);
  return {
    socketPath,
    dir,
    process: child,
    async stop() {
      child.kill("SIGTERM");
      await exited(child);
    },
    async kill() {
      child.kill("SIGKILL");
      await exited(child);
    },
  };
}
