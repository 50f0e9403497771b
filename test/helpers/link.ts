/**
 * A TCP link to a unix socket (a test's Redis) for tests that break a
 * connection: `cut` resets every connection it carries, new ones welcome;
 * `down` also refuses every later one, until `up`; while `drop` is set, a
 * connection whose client sends a chunk it matches is reset, the chunk still
 * carried to the server: a command that runs while its answer is lost.
 */
import { createConnection, createServer, type AddressInfo, type Socket } from "node:net";

export interface Link {
  readonly address: string;
  cut(): void;
  down(): void;
  up(): void;
  drop?: (chunk: Buffer) => boolean;
  close(): Promise<void>;
}

export async function startLink(socketPath: string): Promise<Link> {
  /** Each client connection (TCP) with its upstream (the unix socket). */
  const sockets = new Set<Socket>();
  let up = true;
  const server = createServer((client) => {
    if (!up) return void client.destroy();
    const upstream = createConnection({ path: socketPath });
    sockets.add(client);
    for (const s of [client, upstream]) {
      s.on("error", () => undefined);
      s.on("close", () => {
        sockets.delete(client);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on("data", (chunk: Buffer) => {
      if (!link.drop?.(chunk)) return;
      upstream.unpipe(client); // no answer goes back
      setImmediate(() => client.resetAndDestroy()); // after pipe() carried the chunk
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const cut = () => {
    for (const s of [...sockets]) s.resetAndDestroy(); // the upstream closes with it
  };
  const link: Link = {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut,
    down() {
      up = false;
      cut();
    },
    up() {
      up = true;
    },
    async close() {
      cut();
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
  return link;
}

