import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The chaos suite is its own project: npm run test:chaos (vitest.chaos.config.ts).
    exclude: ["test/chaos/**", "**/node_modules/**"],
    pool: "forks",
    // Two files at a time even on 2 vCPUs, where vitest's default is one: the files mostly wait on
    // Redis and on child processes (about 290 s for npm test's files there, against 475 s one at a
    // time). The cluster run, six redis-servers a file, keeps vitest's default.
    maxWorkers: process.env.SWITCHYARD_TEST_REDIS === "cluster" ? undefined : Math.max(2, availableParallelism() - 1),
    // Kills a redis-server a file started and left running (a test that failed before its clean-up).
    setupFiles: ["test/helpers/reap-redis.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The machine is shared: give polls for asynchronous outcomes room beyond vitest's 1 s default.
    expect: { poll: { timeout: 5000 } },
  },
});
