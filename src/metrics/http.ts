/**
 * The side HTTP port (SPEC S2): `/metrics` for Prometheus, `/healthz`
 * (liveness) and `/readyz` (readiness), plain node:http, GET and HEAD; and,
 * once the instance serves, the web dashboard (`/dashboard/`) and its API
 * (`/api/`, see src/web).
 *
 * - /healthz: 200 while the process serves, 503 once it has shut down. It does
 *   not look at Redis: a Redis outage is no reason to restart Switchyard.
 * Every request must name a host it may (DNS rebinding: a page on
 * attacker.example whose name now resolves to 127.0.0.1 would otherwise read
 * the dashboard's API and metrics from the victim's browser): an IP address,
 * localhost, or a name in SWITCHYARD_HTTP_HOSTS. A rebinding page can only
 * send its own name, never an address.
 *
 * - /readyz: 200 while the instance is ready (src/redis/readiness.ts: Redis
 *   answers a PING within a second, the instance is not starting or shutting
 *   down), else 503 with the reason. gRPC health answers from the same check.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { isIP, type AddressInfo } from "node:net";
import type { Logger } from "../log.js";
import type { PromMetrics, QueueSource } from "./registry.js";
import { API_PREFIX, type WebApi } from "../web/gateway.js";
import { DASHBOARD_PREFIX, type DashboardAssets } from "../web/assets.js";

/** The dashboard and the web API it calls. */
export interface WebParts {
  api: WebApi;
  assets: DashboardAssets;
}

/** What the endpoints answer from. */
export interface SideParts {
  metrics: PromMetrics;
  /** Host names served besides IP addresses and localhost (lower case). */
  hosts: readonly string[];
  /** Set once the queues are up (see {@link SideServer.setQueues}); until then /metrics has no queue gauges. */
  queues?: QueueSource;
  /** Set once the gRPC server is up (see {@link SideServer.setWeb}). */
  web?: WebParts;
  /** False once the instance has shut down. */
  live(): boolean;
  /** undefined when ready, else why not. */
  ready(): Promise<string | undefined>;
}

/** A listening side server. */
export interface SideServer {
  /** host:port it is bound to. */
  readonly address: string;
  /** Where /metrics reads the queue gauges from from now on. */
  setQueues(source: QueueSource): void;
  /** Serves the dashboard and the web API from now on. */
  setWeb(web: WebParts): void;
  close(): Promise<void>;
}

/** Splits "host:port" / "[v6]:port" for node:net. */
function hostPort(address: string): { host: string; port: number } {
  const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(address);
  if (!m) throw new Error(`"${address}" is not host:port`);
  return { host: m[1], port: Number(m[2]) };
}

function reply(res: ServerResponse, status: number, body: string, type = "text/plain; charset=utf-8"): void {
  res.writeHead(status, { "content-type": type, "cache-control": "no-store" });
  res.end(body);
}

/** The host a request names, without its port (and an IPv6 address without brackets); undefined with no Host header. */
function hostOf(req: IncomingMessage): string | undefined {
  const host = req.headers.host?.trim().toLowerCase();
  if (host === undefined) return undefined;
  if (host.startsWith("[")) return host.slice(1, host.indexOf("]"));
  return host.replace(/:\d*$/, "").replace(/\.$/, "");
}

/** True when a request names a host this port serves (a request with none comes from no browser). */
function servedHost(req: IncomingMessage, hosts: readonly string[]): boolean {
  const host = hostOf(req);
  return host === undefined || isIP(host) !== 0 || host === "localhost" || hosts.includes(host);
}

async function route(req: IncomingMessage, res: ServerResponse, parts: SideParts, log: Logger): Promise<void> {
  const path = (req.url ?? "/").split("?")[0];
  if (!servedHost(req, parts.hosts)) {
    return reply(res, 403, `host "${hostOf(req)}" is not served here: use an IP address or localhost, or list the name in SWITCHYARD_HTTP_HOSTS\n`);
  }
  if (path.startsWith(`${API_PREFIX}/`)) {
    if (!parts.web) return reply(res, 503, "the web API is not served: the instance is starting, or SWITCHYARD_DASHBOARD is off\n");
    return parts.web.api.handle(req, res);
  }
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("allow", "GET, HEAD");
    return reply(res, 405, "method not allowed\n");
  }
  if (path.startsWith(DASHBOARD_PREFIX)) {
    if (!parts.web) return reply(res, 503, "the dashboard is not served: the instance is starting, or SWITCHYARD_DASHBOARD is off\n");
    return parts.web.assets.serve(req, res, path);
  }
  switch (path) {
    case "/":
    case "/dashboard":
      res.writeHead(302, { location: DASHBOARD_PREFIX, "cache-control": "no-store" });
      return void res.end();
    case "/metrics":
      return reply(res, 200, await parts.metrics.scrape(parts.queues, log), parts.metrics.contentType);
    case "/healthz":
      return parts.live() ? reply(res, 200, "ok\n") : reply(res, 503, "shut down\n");
    case "/readyz": {
      const why = await parts.ready();
      return why === undefined ? reply(res, 200, "ready\n") : reply(res, 503, `not ready: ${why}\n`);
    }
    default:
      return reply(res, 404, "not found: try /dashboard/, /metrics, /healthz or /readyz\n");
  }
}

/** Listens on `address` ("host:port"; port 0 picks one). */
export async function startSideServer(address: string, parts: SideParts, log: Logger): Promise<SideServer> {
  const server = createServer((req, res) => {
    route(req, res, parts, log).catch((err: unknown) => {
      log.error("side port request failed", { path: req.url, err });
      if (!res.headersSent) reply(res, 500, "internal error\n");
      else res.destroy();
    });
  });
  // Scrapes and probes are short: idle keep-alive connections must not hold up close().
  server.keepAliveTimeout = 5000;
  const { host, port } = hostPort(address);
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(port, host, () => {
      server.off("error", fail);
      ok();
    });
  });
  const bound = server.address() as AddressInfo;
  const shown = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  return {
    address: `${shown}:${bound.port}`,
    setQueues: (source) => (parts.queues = source),
    setWeb: (web) => (parts.web = web),
    close: () =>
      new Promise<void>((ok) => {
        server.close(() => ok());
        server.closeAllConnections();
      }),
  };
}
