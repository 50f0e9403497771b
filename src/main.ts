/** `npm start`: runs one Switchyard instance until SIGTERM or SIGINT. */
import { startApp } from "./app.js";
import { loadConfig } from "./config.js";
import { SwitchyardError } from "./errors.js";
import { createLogger } from "./log.js";

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  const app = await startApp(config, { log });
  process.stdout.write(`switchyard listening on ${app.address}\n`);
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
}

main().catch((err: unknown) => {
  const message = err instanceof SwitchyardError ? err.message : err instanceof Error ? err.stack : String(err);
  process.stderr.write(`switchyard: ${message}\n`);
  process.exit(1);
});
