/**
 * The dashboard's built files (`npm run build` → dist/dashboard), served on
 * the side HTTP port under /dashboard/ with a content security policy that
 * allows only this origin's scripts, styles and API, and with caching that
 * fits Vite's output: the hashed files under assets/ never change (cached for
 * a year), index.html is revalidated on every load (ETag).
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join, relative, sep } from "node:path";
import type { IncomingMessage, ServerResponse } from "node:http";

/** Where the dashboard is served. */
export const DASHBOARD_PREFIX = "/dashboard/";

/** The built dashboard, two levels above this module in both src/web and dist/web. */
export const DEFAULT_DASHBOARD_DIR = new URL("../../dist/dashboard/", import.meta.url).pathname;

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8",
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
  immutable: boolean;
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

/** Serves the files of a built dashboard, read once when created. */
export class DashboardAssets {
  private readonly files = new Map<string, Asset>();

  constructor(readonly dir: string = DEFAULT_DASHBOARD_DIR) {
    if (!existsSync(dir)) return;
    for (const path of walk(dir)) {
      const name = relative(dir, path).split(sep).join("/");
      const body = readFileSync(path);
      this.files.set(name, {
        body,
        type: TYPES[extname(name)] ?? "application/octet-stream",
        etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 22)}"`,
        immutable: name.startsWith("assets/"),
      });
    }
  }

  /** Whether a built dashboard was found. */
  get built(): boolean {
    return this.files.has("index.html");
  }

  /** Answers a GET or HEAD for `path` (under {@link DASHBOARD_PREFIX}). */
  serve(req: IncomingMessage, res: ServerResponse, path: string): void {
    const headers: Record<string, string> = {
      "content-security-policy": CONTENT_SECURITY_POLICY,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "x-frame-options": "DENY",
    };
    if (!this.built) {
      res.writeHead(503, { ...headers, "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      res.end(`the dashboard is not built: run npm run build (looked in ${this.dir})\n`);
      return;
    }
    const name = path.slice(DASHBOARD_PREFIX.length) || "index.html";
    // Unknown paths get the page itself: the dashboard routes in the browser (#/queues/...).
    const asset = this.files.get(name) ?? (name.startsWith("assets/") ? undefined : this.files.get("index.html"));
    if (!asset) {
      res.writeHead(404, { ...headers, "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      res.end(`not found: ${path}\n`);
      return;
    }
    headers["content-type"] = asset.type;
    headers["cache-control"] = asset.immutable ? "public, max-age=31536000, immutable" : "no-cache";
    headers.etag = asset.etag;
    if (req.headers["if-none-match"] === asset.etag) {
      res.writeHead(304, headers);
      res.end();
      return;
    }
    headers["content-length"] = String(asset.body.length);
    res.writeHead(200, headers);
    res.end(req.method === "HEAD" ? undefined : asset.body);
  }
}
