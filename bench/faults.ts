/**
 * Network faults for the benchmark rows and the tests (test/helpers re-exports
 * these): a TCP proxy that cuts or blackholes a link, and a Lease call over
 * plain HTTP/2 for workers no gRPC library would make (one that never reads,
 * one that never opens).
 *
 * The proxy, on 127.0.0.1 (node:net), sits in front of a TCP address or a
 * unix socket: clients connect to it instead of the server.
 * - `cut()` resets every connection it carries, both ways, as a failing
 *   network or load balancer would; new connections keep working.
 * - `blackhole()` keeps every connection open but carries nothing more either
 *   way (the proxy stops reading, so senders' buffers fill as behind a dead
 *   link), and new connections are accepted but never reach the server: TCP
 *   open, no answers. `restore()` carries everything held, in order, again.
 * - `holdReplies()` stops carrying bytes from the server on the open
 *   connections while requests still reach it: a call is served but its
 *   answer never arrives, as when a link fails one way just after the
 *   request; `cut()` then ends those connections.
 * - `down()` resets every connection it carries, and every new one at once,
 *   as a stopped server would, until `restore()`.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { connect, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { LeaseRequestSchema } from "../dist/gen/switchyard/v1/queue_pb.js";

export interface TcpProxy {
  /** host:port to give clients. */
  readonly address: string;
  /** Connections open now. */
  readonly open: number;
  /** Resets every open connection (RST on both sides); returns how many it cut. */
  cut(): number;
  /** Stops carrying anything, keeping connections open (see above). */
  blackhole(): void;
  /** Holds what the server sends on the open connections; requests still go through (see above). */
  holdReplies(): void;
  /** Resets every connection, and each new one, until restore(): the server is down. */
  down(): void;
  /** Ends a blackhole, held replies or a down: held bytes and held connections go through; new connections reach the server. */
  restore(): void;
  close(): Promise<void>;
}

/** Starts a proxy to `target`: "host:port", or "unix:<path>" for a unix socket. */
export async function startProxy(target: string): Promise<TcpProxy> {
  const upstreamOf = (): Socket => {
    if (target.startsWith("unix:")) return createConnection({ path: target.slice("unix:".length) });
    const i = target.lastIndexOf(":");
    return createConnection({ host: target.slice(0, i), port: Number(target.slice(i + 1)) });
  };
  const pairs = new Set<[Socket, Socket | undefined]>();
  let holding = false;
  let refusing = false;
  const join = (pair: [Socket, Socket | undefined]) => {
    const [client] = pair;
    const upstream = (pair[1] ??= upstreamOf());
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    upstream.on("error", drop);
    upstream.on("close", drop);
    client.pipe(upstream);
    upstream.pipe(client);
  };
  const server: Server = createServer((client) => {
    const pair: [Socket, Socket | undefined] = [client, undefined];
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      pair[1]?.destroy();
    };
    client.on("error", drop);
    client.on("close", drop);
    if (refusing) client.resetAndDestroy();
    else if (holding) client.pause();
    else join(pair);
  });
  const cut = () => {
    const n = pairs.size;
    for (const [a, b] of [...pairs]) {
      a.resetAndDestroy();
      // A unix socket has no RST to send: it is closed.
      if (target.startsWith("unix:")) b?.destroy();
      else b?.resetAndDestroy();
    }
    pairs.clear();
    return n;
  };
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const addr = server.address();
  if (!addr || typeof addr === "string") throw new Error("proxy has no TCP address");
  return {
    address: `127.0.0.1:${addr.port}`,
    get open() {
      return pairs.size;
    },
    cut,
    down() {
      refusing = true;
      cut();
    },
    blackhole() {
      holding = true;
      for (const [client, upstream] of pairs) {
        client.unpipe();
        upstream?.unpipe();
        client.pause();
        upstream?.pause();
      }
    },
    holdReplies() {
      for (const [client, upstream] of pairs) {
        upstream?.unpipe(client);
        upstream?.pause();
      }
    },
    restore() {
      holding = refusing = false;
      for (const pair of pairs) {
        const [client, upstream] = pair;
        if (!upstream) join(pair);
        else {
          // Unpiped first: a direction still carried (held replies) must not be piped twice.
          client.unpipe(upstream);
          upstream.unpipe(client);
          client.pipe(upstream);
          upstream.pipe(client);
        }
      }
    },
    async close() {
      for (const [a, b] of pairs) {
        a.destroy();
        b?.destroy();
      }
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}

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
