/**
 * Throwaway certificates made with openssl in a temp folder for one test file:
 * CAs, and certificates they sign. No key is ever committed.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** X.509 extensions of a server certificate for 127.0.0.1 and localhost. */
export const SERVER_EXT = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n";
/** X.509 extensions of a client certificate. */
export const CLIENT_EXT = "extendedKeyUsage=clientAuth\n";

/** A folder of PEM files: `<name>.crt` and `<name>.key`. */
export interface Certs {
  /** The path of a file in the folder. */
  file(name: string): string;
  read(name: string): Buffer;
  /** A CA: a self-signed EC key and certificate. */
  makeCa(name: string): void;
  /** A certificate for `cn` signed by `ca`, with the given X.509 extensions. */
  makeCert(name: string, cn: string, ca: string, extensions: string): void;
  cleanup(): void;
}

export function certificates(): Certs {
  const dir = mkdtempSync(join(tmpdir(), "sy-tls-"));
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) => void execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  return {
    file,
    read: (name) => readFileSync(file(name)),
    makeCa(name) {
      openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", `${name}.key`, "-out", `${name}.crt`, "-days", "1", "-subj", `/CN=${name}`);
    },
    makeCert(name, cn, ca, extensions) {
      writeFileSync(file(`${name}.ext`), extensions);
      openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`);
      openssl("x509", "-req", "-in", `${name}.csr`, "-CA", `${ca}.crt`, "-CAkey", `${ca}.key`, "-CAcreateserial",
        "-out", `${name}.crt`, "-days", "1", "-extfile", `${name}.ext`);
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
