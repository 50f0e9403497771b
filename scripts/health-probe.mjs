// Docker HEALTHCHECK: calls grpc.health.v1.Health/Check and exits 0 when the
// answer is SERVING, 1 otherwise (error, timeout, NOT_SERVING).
// Usage: node scripts/health-probe.mjs [address] [service]   ("" = the whole server)
// The address defaults to where SWITCHYARD_GRPC_ADDRESS listens, seen from the same host: its unix:PATH
// as it is, a wildcard host (0.0.0.0, [::]) as loopback, any other host:port as it is; unset, 127.0.0.1:50051.
import * as grpc from "@grpc/grpc-js";

function listening(address = "127.0.0.1:50051") {
  if (address.startsWith("unix:")) return address;
  const port = address.slice(address.lastIndexOf(":") + 1);
  const host = address.slice(0, address.lastIndexOf(":"));
  if (host === "0.0.0.0") return `127.0.0.1:${port}`;
  if (host === "[::]") return `[::1]:${port}`;
  return address;
}

const [address = listening(process.env.SWITCHYARD_GRPC_ADDRESS || undefined), service = ""] = process.argv.slice(2);
const SERVING = 1;

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

const client = new grpc.Client(address, grpc.credentials.createInsecure());
client.makeUnaryRequest(
  "/grpc.health.v1.Health/Check",
  encodeRequest,
  (buf) => buf,
  service,
  { deadline: Date.now() + 3000 },
  (err, response) => {
    client.close();
    const status = err ? -1 : decodeStatus(response);
    if (status === SERVING) process.exit(0);
    process.stderr.write(`health probe ${address}: ${err ? err.message : `status ${status}, not SERVING`}\n`);
    process.exit(1);
  },
);
