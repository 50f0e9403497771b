/**
 * `npm start` and `switchyard serve`: runs one Switchyard instance until
 * SIGTERM or SIGINT. Nothing here imports grpc-js: app.js is imported only
 * after the OpenTelemetry preload module (otel.ts), when that is on.
 */
import { lowerBackgroundThreads } from "./background-threads.js";
import { loadConfig } from "./config.js";
import { SwitchyardError } from "./errors.js";
import { createLogger } from "./log.js";
import { loadInstrumentation } from "./otel.js";

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  if (await loadInstrumentation(config)) log.info("opentelemetry preloaded", { module: config.otelModule });
  const { startApp } = await import("./app.js");
  const app = await startApp(config, { log });
  // After the start, so that every thread the start made (libuv's pool is running by then) is lowered too.
  if (config.backgroundNice > 0) {
    const { lowered, failed } = lowerBackgroundThreads(config.backgroundNice);
    if (failed) {
      log.warn("could not lower the background threads' priority (SWITCHYARD_BACKGROUND_NICE=0 leaves them alone)", { nice: config.backgroundNice, lowered, reason: failed });
    } else if (lowered > 0) log.debug("background threads lowered", { nice: config.backgroundNice, threads: lowered });
  }
  let signals = 0;
  const shutdown = (signal: string) => {
    if (++signals > 1) process.exit(1); // A second signal: exit at once.
    log.info("shutting down", { signal });
    app.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        log.error("shutdown failed", { err });
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
  // Announced only now: whoever waits for these lines may send a signal at once.
  process.stdout.write(`switchyard listening on ${app.address}\n`);
  if (app.httpAddress) process.stdout.write(`switchyard metrics on http://${app.httpAddress}/metrics\n`);
  if (app.httpAddress && config.dashboard) process.stdout.write(`switchyard dashboard on http://${app.httpAddress}/dashboard/\n`);
}

main().catch((err: unknown) => {
  const message = err instanceof SwitchyardError ? err.message : err instanceof Error ? err.stack : String(err);
  process.stderr.write(`switchyard: ${message}\n`);
  process.exit(1);
});
