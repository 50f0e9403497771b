import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The chaos suite is its own project: npm run test:chaos (vitest.chaos.config.ts).
    exclude: ["test/chaos/**", "**/node_modules/**"],
    pool: "forks",
    // Kills a redis-server a file started and left running (a test that failed before its clean-up).
    setupFiles: ["test/helpers/reap-redis.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The machine is shared: give polls for asynchronous outcomes room beyond vitest's 1 s default.
    expect: { poll: { timeout: 5000 } },
  },
});
