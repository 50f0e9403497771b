/** The embedded redis-server's start (src/redis/embedded.ts): it resolves only for a server that runs. */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import { startEmbeddedRedis } from "../../src/redis/embedded.js";
import { freeBasePort } from "../helpers/cluster.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

it("refuses a Cluster node that aborts after its socket accepted: its bus port taken", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sy-embedded-"));
  dirs.push(dir);
  const port = await freeBasePort(1);
  // Redis binds its port and socket first, then the cluster bus (port + 10000), and exits when that is taken.
  const bus: Server = createServer();
  await new Promise<void>((ok) => bus.listen(port + 10_000, "127.0.0.1", ok));
  try {
    for (let i = 0; i < 5; i++) {
      const starting = startEmbeddedRedis({
        dir: join(dir, String(i)), port, appendOnly: false,
        extraArgs: ["--cluster-enabled", "yes", "--cluster-config-file", join(dir, `nodes-${i}.conf`)],
      });
      await expect(starting).rejects.toThrow(/exited with code 1/);
    }
  } finally {
    bus.close();
  }
});
