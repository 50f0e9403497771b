/**
 * The command line against servers with TLS on their port: --ca-file trusts a
 * CA, --cert-file/--key-file present a client certificate (mutual TLS), and
 * --server-name checks the certificate for another name than the address's.
 */
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SwitchyardClient } from "../../src/client/client.js";
import { run } from "../../src/cli/run.js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { certificates, CLIENT_EXT, SERVER_EXT, type Certs } from "../helpers/certs.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

let certs: Certs;
let redis: TestRedis;
/** TLS with client certificates required; its certificate names 127.0.0.1. */
let mutual: TestSwitchyard;
/** TLS without client certificates; its certificate names only switchyard.internal. */
let named: TestSwitchyard;

beforeAll(async () => {
  certs = certificates();
  certs.makeCa("ca");
  certs.makeCert("server", "localhost", "ca", SERVER_EXT);
  certs.makeCert("internal", "switchyard.internal", "ca", "subjectAltName=DNS:switchyard.internal\nextendedKeyUsage=serverAuth\n");
  certs.makeCert("cli", "cli", "ca", CLIENT_EXT);
  redis = await startRedis();
  const tls = (cert: string) => ({ SWITCHYARD_TLS_CERT: certs.file(`${cert}.crt`), SWITCHYARD_TLS_KEY: certs.file(`${cert}.key`), SWITCHYARD_AUTH: "off" });
  mutual = await startSwitchyard(redis, {
    env: { ...tls("server"), SWITCHYARD_TLS_CA: certs.file("ca.crt"), SWITCHYARD_TLS_CLIENT_AUTH: "require" },
  });
  named = await startSwitchyard(redis, { env: tls("internal") });
  const admin = new SwitchyardClient(mutual.address, {
    credentials: grpc.credentials.createSsl(certs.read("ca.crt"), certs.read("cli.key"), certs.read("cli.crt")),
  });
  await admin.createQueue({ name: "{tls}", mode: QueueMode.SIMPLE });
  admin.close();
}, 60_000);
afterAll(async () => {
  await mutual?.stop();
  await named?.stop();
  await redis?.stop();
  certs?.cleanup();
});

async function cli(address: string, ...args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await run(["queue", "list", "--address", address, "--timeout", "5s", ...args], {}, { out: (t) => void (out += t), err: (t) => void (err += t) }, async () => []);
  return { code, out, err };
}

describe("switchyard --tls, --ca-file, --cert-file, --key-file, --server-name", () => {
  it("reaches a mutual-TLS server with the CA and a client certificate", async () => {
    const r = await cli(mutual.address, "--ca-file", certs.file("ca.crt"), "--cert-file", certs.file("cli.crt"), "--key-file", certs.file("cli.key"));
    expect(r).toMatchObject({ code: 0, err: "" });
    expect(r.out).toContain("{tls}");
  });

  it("is refused without a client certificate, and cannot talk plaintext to a TLS port", async () => {
    const noCert = await cli(mutual.address, "--ca-file", certs.file("ca.crt"));
    expect(noCert.code).toBe(1);
    expect(noCert.err).toMatch(/^switchyard: UNAVAILABLE: /);
    const plain = await cli(mutual.address);
    expect(plain.code).toBe(1);
    expect(plain.err).toMatch(/^switchyard: UNAVAILABLE: /);
  });

  it("checks the certificate for --server-name instead of the address's host", async () => {
    const wrongName = await cli(named.address, "--ca-file", certs.file("ca.crt"));
    expect(wrongName.code).toBe(1);
    expect(wrongName.err).toMatch(/^switchyard: UNAVAILABLE: /);
    const right = await cli(named.address, "--ca-file", certs.file("ca.crt"), "--server-name", "switchyard.internal");
    expect(right).toMatchObject({ code: 0, err: "" });
  });

  it("says what to fix when a file is missing or a certificate comes without its key", async () => {
    const missing = await cli(mutual.address, "--ca-file", "/nonexistent/ca.crt");
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('switchyard: --ca-file: cannot read "/nonexistent/ca.crt": ENOENT');
    const half = await cli(mutual.address, "--cert-file", certs.file("cli.crt"));
    expect(half.code).toBe(2);
    expect(half.err).toContain("switchyard: --cert-file and --key-file go together: a client certificate and its key");
  });
});
