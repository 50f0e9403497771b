/**
 * One HTTP job call (SPEC C7) through the SSRF guard: every hop, the first
 * request and each redirect, is checked by the guard and connected to the
 * exact address it approved. Redirects are followed here, not by the HTTP
 * client, so none can skip the check.
 */
import * as http from "node:http";
import * as https from "node:https";
import type { LookupFunction } from "node:net";
import type { Destination, HttpGuard } from "./http-guard.js";

/** Redirects followed at most (fetch follows 20; a job needs few). */
export const MAX_REDIRECTS = 5;
/** Bytes of a response body read at most: enough for the 1000 characters the log keeps. */
const MAX_BODY_BYTES = 64 * 1024;

/** A finished call: the final status and the start of the body. */
export interface HttpResult {
  status: number;
  body: string;
}

/** Thrown for a redirect chain longer than MAX_REDIRECTS. */
export class TooManyRedirects extends Error {
  override readonly name = "TooManyRedirects";
}

/** A lookup that answers with the address the guard checked, whatever DNS would say now. */
function pinned(dest: Destination): LookupFunction {
  return ((_host: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (options?.all) callback(null, [{ address: dest.address, family: dest.family }]);
    else callback(null, dest.address, dest.family);
  }) as LookupFunction;
}

function send(url: URL, dest: Destination, method: string, body: string | undefined, signal: AbortSignal): Promise<http.IncomingMessage> {
  const headers: http.OutgoingHttpHeaders = {};
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    headers["content-length"] = Buffer.byteLength(body);
  }
  const options: https.RequestOptions = {
    method,
    host: dest.host,
    port: dest.port,
    path: `${url.pathname}${url.search}`,
    headers,
    lookup: pinned(dest),
    // A fresh connection per call: a pooled socket must not outlive the check that allowed it.
    agent: false,
    signal,
  };
  return new Promise((ok, fail) => {
    const req = (url.protocol === "https:" ? https : http).request(options, ok);
    req.on("error", fail);
    req.end(body);
  });
}

async function readBody(res: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= MAX_BODY_BYTES) {
      res.destroy();
      break;
    }
  }
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * Calls `target`: GET without `params`, else POST them as JSON. Follows up to
 * MAX_REDIRECTS redirects (303, and 301/302 after a POST, continue as GET, as
 * browsers and fetch do). Rejects with the guard's RefusedDestination, a
 * TooManyRedirects, or the network error.
 */
export async function callHttp(target: string, params: string, guard: HttpGuard, signal: AbortSignal): Promise<HttpResult> {
  let url = new URL(target);
  let body = params.trim() === "" ? undefined : params;
  let method = body === undefined ? "GET" : "POST";
  for (let redirects = 0; ; redirects++) {
    const dest = await guard.destination(url);
    signal.throwIfAborted();
    const res = await send(url, dest, method, body, signal);
    const status = res.statusCode ?? 0;
    const location = res.headers.location;
    if (![301, 302, 303, 307, 308].includes(status) || !location) return { status, body: await readBody(res) };
    res.destroy();
    if (redirects === MAX_REDIRECTS) throw new TooManyRedirects(`more than ${MAX_REDIRECTS} redirects (the last to ${location})`);
    url = new URL(location, url);
    if (status === 303 || ((status === 301 || status === 302) && method === "POST")) {
      method = "GET";
      body = undefined;
    }
  }
}
