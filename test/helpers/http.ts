/** Plain HTTP GETs to an instance's side port, and a reader of Prometheus text. */
import { request } from "node:http";

/** Status and body of GET http://`address``path`. */
export async function get(address: string, path: string): Promise<{ status: number; body: string; type: string }> {
  const res = await fetch(`http://${address}${path}`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: await res.text(), type: res.headers.get("content-type") ?? "" };
}

/** Samples of a Prometheus text exposition, keyed `name{label="v",...}` with labels sorted by name. */
export type Samples = Map<string, number>;

/** Parses the text format (one `name{labels} value` line per sample; comments skipped). */
export function parseMetrics(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels = m[2] ? [...m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]] as const) : [];
    out.set(key(m[1], Object.fromEntries(labels)), Number(m[3]));
  }
  return out;
}

/** The key of a sample in {@link Samples}. */
export function key(name: string, labels: Record<string, string> = {}): string {
  const parts = Object.keys(labels)
    .sort()
    .map((k) => `${k}="${labels[k]}"`);
  return parts.length ? `${name}{${parts.join(",")}}` : name;
}

/** Scrapes /metrics of the side port at `address`. */
export async function scrape(address: string): Promise<Samples> {
  const res = await get(address, "/metrics");
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${res.body}`);
  return parseMetrics(res.body);
}

/** How much each sample in `names` moved between two scrapes (absent counts as 0). */
export function delta(before: Samples, after: Samples, name: string, labels: Record<string, string> = {}): number {
  const k = key(name, labels);
  return (after.get(k) ?? 0) - (before.get(k) ?? 0);
}

/**
 * Sends a request to the side port at `address` with any headers (Host too)
 * and up to `send` bytes of a body that may announce more, and resolves with
 * the response as soon as it comes, whether or not the body was all sent.
 */
export function send(
  address: string,
  options: { method?: string; path: string; headers?: Record<string, string>; send?: number },
): Promise<{ status: number; body: string }> {
  const i = address.lastIndexOf(":");
  return new Promise((ok, fail) => {
    const req = request({ host: address.slice(0, i), port: Number(address.slice(i + 1)), method: options.method ?? "GET", path: options.path, headers: options.headers });
    const timer = setTimeout(() => {
      req.destroy();
      fail(new Error(`no response to ${options.path} within 5 s`));
    }, 5000);
    req.on("error", () => undefined); // the server may close as it answers
    req.on("response", (res) => {
      let body = "";
      res.on("data", (chunk: Buffer) => (body += chunk.toString()));
      res.on("end", () => {
        clearTimeout(timer);
        req.destroy();
        ok({ status: res.statusCode ?? 0, body });
      });
    });
    if (options.send) req.write(Buffer.alloc(options.send, 0x7b));
    else req.end();
  });
}
