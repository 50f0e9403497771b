/** Server credentials: plaintext, TLS, or mutual TLS, from the configured files. */
import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { invalid } from "../errors.js";
import type { TlsSettings } from "../auth/settings.js";

function read(variable: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw invalid(`${variable}: cannot read "${path}": ${err instanceof Error ? err.message : String(err)}`);
  }
}

/**
 * Credentials for the gRPC port. Without TLS settings, plaintext (for a mesh
 * sidecar that terminates TLS). With client auth "require", a client must show
 * a certificate that chains to the CA file, or the handshake fails.
 */
export function serverCredentials(tls: TlsSettings | undefined): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  const pair = { cert_chain: read("SWITCHYARD_TLS_CERT", tls.certFile), private_key: read("SWITCHYARD_TLS_KEY", tls.keyFile) };
  const ca = tls.caFile ? read("SWITCHYARD_TLS_CA", tls.caFile) : null;
  try {
    return grpc.ServerCredentials.createSsl(ca, [pair], tls.clientAuth === "require");
  } catch (err) {
    throw invalid(`TLS settings: ${err instanceof Error ? err.message : String(err)}`);
  }
}
