/** Switchyard as a library: the client, the worker helper, and the server's composition root. */
export * from "./client/index.js";
export { startApp, type App, type AppParts } from "./app.js";
export { loadConfig, type Config } from "./config.js";
export type { JobHandler, RunContext } from "./cron/handlers.js";
