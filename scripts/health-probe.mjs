// Docker HEALTHCHECK: exits 0 when the server says it serves, 1 otherwise (error, timeout, not serving).
// Usage: node scripts/health-probe.mjs [address] [service]   ("" = the whole server; both for a plaintext port only)
// Plaintext gRPC port: calls grpc.health.v1.Health/Check where SWITCHYARD_GRPC_ADDRESS listens, seen
// from the same host: its unix:PATH as it is, a wildcard host (0.0.0.0, [::]) as loopback, any other
// host:port as it is; unset, 127.0.0.1:50051.
// TLS on the gRPC port (SWITCHYARD_TLS_CERT): a probe has no certificate to present, nor a name the
// server's certificate carries, so it asks GET /readyz on SWITCHYARD_HTTP_ADDRESS (plain HTTP, the same
// answer: both come from one readiness state) instead, and says so if that port is off.
import * as grpc from "@grpc/grpc-js";
import { request } from "node:http";

const SERVING = 1;
const TIMEOUT_MS = 3000;

function listening(address) {
  if (address.startsWith("unix:")) return address;
  const port = address.slice(address.lastIndexOf(":") + 1);
  const host = address.slice(0, address.lastIndexOf(":"));
  if (host === "0.0.0.0") return `127.0.0.1:${port}`;
  if (host === "[::]") return `[::1]:${port}`;
  return address;
}

function fail(where, why) {
  process.stderr.write(`health probe ${where}: ${why}\n`);
  process.exit(1);
}

// The two messages are tiny, so they are encoded by hand rather than pulling in generated code.
// HealthCheckRequest { string service = 1; }
function encodeRequest(name) {
  const bytes = Buffer.from(name, "utf8");
  if (bytes.length === 0) return Buffer.alloc(0);
  const len = [];
  for (let n = bytes.length; ; n >>>= 7) {
    if (n < 0x80) { len.push(n); break; }
    len.push((n & 0x7f) | 0x80);
  }
  return Buffer.concat([Buffer.from([0x0a, ...len]), bytes]);
}

// HealthCheckResponse { ServingStatus status = 1; }: tag 0x08 then a one-byte varint (values 0..3).
function decodeStatus(buf) {
  return buf.length >= 2 && buf[0] === 0x08 ? buf[1] : 0;
}

function probeGrpc(address, service) {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  client.makeUnaryRequest(
    "/grpc.health.v1.Health/Check",
    encodeRequest,
    (buf) => buf,
    service,
    { deadline: Date.now() + TIMEOUT_MS },
    (err, response) => {
      client.close();
      const status = err ? -1 : decodeStatus(response);
      if (status === SERVING) process.exit(0);
      fail(address, err ? err.message : `status ${status}, not SERVING`);
    },
  );
}

function probeReadyz(address) {
  const where = `http://${address}/readyz`;
  const colon = address.lastIndexOf(":");
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
  // Host: localhost, which the side port serves whatever name it listens on (a named host is
  // served only when listed in SWITCHYARD_HTTP_HOSTS: its guard against DNS rebinding).
  const headers = { host: "localhost" };
  // `timeout` below is the socket's idle time; this bounds the whole exchange.
  setTimeout(() => fail(where, `no answer in ${TIMEOUT_MS} ms`), TIMEOUT_MS).unref();
  const req = request({ host, port: Number(address.slice(colon + 1)), path: "/readyz", headers, timeout: TIMEOUT_MS }, (res) => {
    if (res.statusCode === 200) process.exit(0);
    let body = "";
    res.setEncoding("utf8");
    res.on("data", (chunk) => (body = (body + chunk).slice(0, 300)));
    res.on("end", () => fail(where, `HTTP ${res.statusCode}, not ready${body.trim() ? `: ${body.trim().replace(/\s+/g, " ")}` : ""}`));
  });
  req.on("timeout", () => req.destroy(new Error(`no answer in ${TIMEOUT_MS} ms`)));
  req.on("error", (err) => fail(where, err.message));
  req.end();
}

const [given, service = ""] = process.argv.slice(2);
const env = process.env;
const grpcAddress = env.SWITCHYARD_GRPC_ADDRESS || "127.0.0.1:50051";
const httpAddress = env.SWITCHYARD_HTTP_ADDRESS || "127.0.0.1:9090";
if (!env.SWITCHYARD_TLS_CERT) probeGrpc(given || listening(grpcAddress), service);
else if (given || service) {
  // A plaintext Check cannot reach a TLS port.
  fail(given || grpcAddress, "the gRPC port has TLS (SWITCHYARD_TLS_CERT), so the probe asks GET /readyz on SWITCHYARD_HTTP_ADDRESS, which answers for the whole server: give no address or service name");
} else if (httpAddress === "off") {
  fail(grpcAddress, "the gRPC port has TLS (SWITCHYARD_TLS_CERT), so the probe asks GET /readyz on the side HTTP port, and SWITCHYARD_HTTP_ADDRESS is off: set it (e.g. 127.0.0.1:9090)");
} else probeReadyz(listening(httpAddress));
