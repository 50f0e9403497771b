/**
 * A TCP link to a unix socket (a test's Redis) for tests that break a
 * connection: `cut` resets every connection it carries, new ones welcome;
 * `down` also refuses every later one, until `up`; while `drop` is set, a
 * connection whose client sends a chunk it matches is reset, the chunk still
 * carried to the server: a command that runs while its answer is lost.
 * `hold` stops one connection's traffic where its client sends a chunk it
 * matches: the test then lets the held requests run and releases the answers
 * when it chooses (an answer that reaches its client late, after events that
 * came on another connection).
 */
import { createConnection, createServer, type AddressInfo, type Socket } from "node:net";

export interface Link {
  readonly address: string;
  cut(): void;
  down(): void;
  up(): void;
  drop?: (chunk: Buffer) => boolean;
  /**
   * Holds the first connection whose client then sends a chunk `match`
   * matches: that chunk and the ones after it stay with the link (not sent to
   * the server), and so does everything the server answers, until the test
   * says; it resolves when such a chunk came.
   */
  hold(match: (chunk: Buffer) => boolean): Promise<Held>;
  close(): Promise<void>;
}

/** One connection held by {@link Link.hold}. */
export interface Held {
  /** The chunks its client sent since the hold began (carried to the server or not), as latin1 text. */
  readonly requests: string[];
  /** What the server answered since the hold began, not yet carried to the client, as latin1 text. */
  readonly replies: string;
  /** Carries the held requests to the server, and later ones as they come; the answers stay held. */
  forward(): void;
  /** Carries the held answers to the client in one write (after any held requests), then everything as usual. */
  release(): void;
}

export async function startLink(socketPath: string): Promise<Link> {
  /** Each client connection (TCP) with its upstream (the unix socket). */
  const sockets = new Set<Socket>();
  let up = true;
  let holding: { match: (chunk: Buffer) => boolean; found: (held: Held) => void } | undefined;
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
    let answering = true;
    /** While held: the client's chunks not yet sent on, and the answers not yet carried back. */
    let requests: Buffer[] | undefined;
    let replies: Buffer[] | undefined;
    const sent: string[] = [];
    client.on("data", (chunk: Buffer) => {
      if (holding?.match(chunk)) {
        const { found } = holding;
        holding = undefined;
        [requests, replies] = [[], []];
        found(held);
      }
      if (replies) sent.push(chunk.toString("latin1"));
      if (requests) return void requests.push(chunk);
      upstream.write(chunk);
      if (!link.drop?.(chunk)) return;
      answering = false; // no answer goes back
      setImmediate(() => client.resetAndDestroy()); // after the chunk was carried
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!answering) return;
      if (replies) replies.push(chunk);
      else client.write(chunk);
    });
    const held: Held = {
      requests: sent,
      get replies() {
        return Buffer.concat(replies ?? []).toString("latin1");
      },
      forward() {
        for (const chunk of requests ?? []) upstream.write(chunk);
        requests = undefined;
      },
      release() {
        held.forward();
        if (replies?.length) client.write(Buffer.concat(replies));
        replies = undefined;
      },
    };
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
    hold(match) {
      return new Promise((found) => (holding = { match, found }));
    },
    async close() {
      cut();
      await new Promise<void>((ok) => server.close(() => ok()));
    },
  };
  return link;
}
