/**
 * An in-test TCP proxy on 127.0.0.1 (node:net): clients connect to it instead
 * of the server; `cut()` resets every connection it carries, both ways, as a
 * failing network or load balancer would. New connections keep working.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

export interface TcpProxy {
  /** host:port to give clients. */
  readonly address: string;
  /** Connections open now. */
  readonly open: number;
  /** Resets every open connection (RST on both sides); returns how many it cut. */
  cut(): number;
  close(): Promise<void>;
}

export async function startProxy(target: string): Promise<TcpProxy> {
  const i = target.lastIndexOf(":");
  const host = target.slice(0, i);
  const port = Number(target.slice(i + 1));
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host, port });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", drop);
    upstream.on("error", drop);
    client.on("close", drop);
    upstream.on("close", drop);
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const addr = server.address();
  if (!addr || typeof addr === "string") throw new Error("proxy has no TCP address");
  return {
    address: `127.0.0.1:${addr.port}`,
    get open() {
      return pairs.size;
    },
    cut() {
      const n = pairs.size;
      for (const [a, b] of [...pairs]) {
        a.resetAndDestroy();
        b.resetAndDestroy();
      }
      pairs.clear();
      return n;
    },
    async close() {
      for (const [a, b] of pairs) {
        a.destroy();
        b.destroy();
      }
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
}
