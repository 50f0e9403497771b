import { defineConfig } from "vitest/config";

/**
 * The chaos suite (`npm run test:chaos`): real redis-server, Switchyard and
 * worker processes, killed and cut on purpose. Scenarios run one file at a
 * time (they measure recovery times on a small machine), each bounded to under
 * a minute; the final table of figures is printed by the global teardown.
 */
export default defineConfig({
  test: {
    include: ["test/chaos/**/*.test.ts"],
    pool: "forks",
    // Kills a redis-server a file started and left running (a test that failed before its clean-up).
    setupFiles: ["test/helpers/reap-redis.ts"],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 30_000,
    globalSetup: ["test/chaos/harness/global.ts"],
  },
});
