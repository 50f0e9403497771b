/** Starts private redis-server processes for tests (never the machine's shared one). */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";

/** A test's own Redis and a plain client for checking its keys. */
export interface TestRedis {
  server: EmbeddedRedis;
  /** A plain ioredis client, as any other Redis user would have. */
  plain: Redis;
  socketPath: string;
  /** Stops the server and removes its folder. */
  stop(): Promise<void>;
}

/** Starts a redis-server on a unix socket in a fresh temp folder. */
export async function startRedis(options: { appendOnly?: boolean } = {}): Promise<TestRedis> {
  const dir = mkdtempSync(join(tmpdir(), "sy-redis-"));
  const server = await startEmbeddedRedis({ dir, appendOnly: options.appendOnly ?? false });
  const plain = new Redis({ path: server.socketPath });
  return {
    server,
    plain,
    socketPath: server.socketPath,
    async stop() {
      plain.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
