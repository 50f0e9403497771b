/**
 * The OpenTelemetry hook point. Instrumentation must patch @grpc/grpc-js
 * (and http, ioredis) before anything imports them, so with SWITCHYARD_OTEL=on
 * main.ts imports the module named by SWITCHYARD_OTEL_MODULE first, and only
 * then the rest of Switchyard. Switchyard ships no OpenTelemetry packages:
 * install the ones you want next to it (README, "Tracing").
 */
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { Config } from "./config.js";
import { SwitchyardError } from "./errors.js";

/** An import specifier for `module`: paths (absolute or ./relative to the working directory) become file URLs. */
export function preloadSpecifier(module: string): string {
  if (isAbsolute(module) || module.startsWith("./") || module.startsWith("../")) return pathToFileURL(resolve(module)).href;
  return module;
}

/** Imports the OpenTelemetry preload module when `config.otel` is on; call before importing app.js. */
export async function loadInstrumentation(config: Pick<Config, "otel" | "otelModule">): Promise<boolean> {
  if (!config.otel) return false;
  try {
    await import(preloadSpecifier(config.otelModule));
  } catch (err) {
    throw new SwitchyardError(
      "failed_precondition",
      `SWITCHYARD_OTEL=on, but ${config.otelModule} could not be loaded (${err instanceof Error ? err.message : String(err)}); ` +
        "install it (npm install @opentelemetry/auto-instrumentations-node) or set SWITCHYARD_OTEL_MODULE",
      { reason: "INTERNAL", cause: err },
    );
  }
  return true;
}
