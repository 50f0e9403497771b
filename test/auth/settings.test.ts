/** Security settings from the environment: tokens by hash, scopes, auth on/off, TLS files (README, "Security"). */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { startApp } from "../../src/app.js";
import { createLogger } from "../../src/log.js";
import { ManualClock } from "../../src/clock.js";
import { Authenticator, tokenHash } from "../../src/auth/authenticator.js";
import { Grants, parseScope } from "../../src/auth/scopes.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";

const SHA = tokenHash("s3cret");
const tokensJson = (scopes: string[]) => JSON.stringify([{ name: "worker", sha256: SHA, scopes }]);

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "sy-auth-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("SWITCHYARD_AUTH and SWITCHYARD_AUTH_TOKENS", () => {
  it("is off without tokens (and says it was not asked for), on with them, off when told", () => {
    expect(loadConfig({}).auth).toMatchObject({ enabled: false, implicitlyOff: true });
    expect(loadConfig({ SWITCHYARD_AUTH_TOKENS: tokensJson(["queue:enqueue"]) }).auth).toMatchObject({ enabled: true, implicitlyOff: false });
    expect(loadConfig({ SWITCHYARD_AUTH: "off", SWITCHYARD_AUTH_TOKENS: tokensJson([]) }).auth).toMatchObject({ enabled: false, implicitlyOff: false });
    expect(loadConfig({ SWITCHYARD_AUTH: "off" }).auth.implicitlyOff).toBe(false);
    expect(() => loadConfig({ SWITCHYARD_AUTH: "on" })).toThrow(/SWITCHYARD_AUTH=on but no caller is configured/);
    expect(() => loadConfig({ SWITCHYARD_AUTH: "yes" })).toThrow(/SWITCHYARD_AUTH="yes" must be on or off/);
  });

  it("reads tokens inline or from a file", () => {
    const path = join(dir, "tokens.json");
    writeFileSync(path, tokensJson(["sys:job:list"]));
    const fromFile = loadConfig({ SWITCHYARD_AUTH_TOKENS: path }).auth.tokens;
    expect(fromFile).toEqual(loadConfig({ SWITCHYARD_AUTH_TOKENS: tokensJson(["sys:job:list"]) }).auth.tokens);
    expect(fromFile[0]).toMatchObject({ name: "worker", sha256: SHA });
    expect(() => loadConfig({ SWITCHYARD_AUTH_TOKENS: join(dir, "missing.json") })).toThrow(/SWITCHYARD_AUTH_TOKENS: cannot read file/);
  });

  it("refuses what it cannot use, naming the entry and what to write instead", () => {
    const bad = (json: unknown) => () => loadConfig({ SWITCHYARD_AUTH_TOKENS: JSON.stringify(json) });
    expect(bad([{ name: "w", token: "s3cret", scopes: [] }])).toThrow(/SWITCHYARD_AUTH_TOKENS\[0\]: never configure a token in plain text/);
    expect(bad([{ name: "w", sha256: "abc", scopes: [] }])).toThrow(/SWITCHYARD_AUTH_TOKENS\[0\]\.sha256: expected 64 hex digits/);
    expect(bad([{ name: "w", sha256: SHA, scopes: ["queue:lease"] }, { name: "w", sha256: tokenHash("x"), scopes: [] }])).toThrow(/"w" appears twice/);
    expect(bad([{ name: "w", sha256: SHA, scopes: ["sys:job:write"] }])).toThrow(/SWITCHYARD_AUTH_TOKENS\[0\]\.scopes: unknown scope "sys:job:write"; use one of sys:job:list/);
    expect(bad([{ name: "w", sha256: SHA, scopes: "queue:lease" }])).toThrow(/expected an array of scope strings/);
    expect(bad({ name: "w" })).toThrow(/expected a JSON array/);
    expect(() => loadConfig({ SWITCHYARD_AUTH_TOKENS: "[{" })).toThrow(/SWITCHYARD_AUTH_TOKENS: not valid JSON/);
  });
});

describe("TLS settings", () => {
  it("is plaintext without files, TLS with a certificate and key, mutual with a CA and require", () => {
    expect(loadConfig({}).tls).toBeUndefined();
    expect(loadConfig({ SWITCHYARD_TLS_CERT: "c.pem", SWITCHYARD_TLS_KEY: "k.pem" }).tls).toEqual({ certFile: "c.pem", keyFile: "k.pem", caFile: "", clientAuth: "none" });
    const mutual = { SWITCHYARD_TLS_CERT: "c.pem", SWITCHYARD_TLS_KEY: "k.pem", SWITCHYARD_TLS_CA: "ca.pem", SWITCHYARD_TLS_CLIENT_AUTH: "require" };
    expect(loadConfig(mutual).tls?.clientAuth).toBe("require");
    const scopes = JSON.stringify([{ cn: "worker-1", scopes: ["queue:lease:{thumbnails}"] }]);
    expect(loadConfig({ ...mutual, SWITCHYARD_TLS_CLIENT_SCOPES: scopes }).auth).toMatchObject({ enabled: true });
  });

  it("refuses half a configuration", () => {
    expect(() => loadConfig({ SWITCHYARD_TLS_CERT: "c.pem" })).toThrow(/set both SWITCHYARD_TLS_CERT and SWITCHYARD_TLS_KEY/);
    expect(() => loadConfig({ SWITCHYARD_TLS_CERT: "c", SWITCHYARD_TLS_KEY: "k", SWITCHYARD_TLS_CLIENT_AUTH: "require" })).toThrow(/needs SWITCHYARD_TLS_CA/);
    expect(() => loadConfig({ SWITCHYARD_TLS_CLIENT_AUTH: "optional" })).toThrow(/must be none or require/);
    expect(() => loadConfig({ SWITCHYARD_TLS_CLIENT_SCOPES: "[]", SWITCHYARD_TLS_CERT: "c", SWITCHYARD_TLS_KEY: "k" })).not.toThrow();
    expect(() =>
      loadConfig({ SWITCHYARD_TLS_CLIENT_SCOPES: JSON.stringify([{ cn: "x", scopes: [] }]), SWITCHYARD_TLS_CERT: "c", SWITCHYARD_TLS_KEY: "k" }),
    ).toThrow(/only SWITCHYARD_TLS_CLIENT_AUTH=require verifies/);
  });
});

describe("scopes and the authenticator", () => {
  it("matches queue patterns exactly or as globs, with braces taken literally", () => {
    const grants = new Grants(["queue:lease:{thumbnails}", "queue:enqueue:cache.*", "queue:admin:job-?"].map((s) => parseScope(s, "test")));
    expect(grants.allows({ scope: "queue:lease", queue: "{thumbnails}" })).toBe(true);
    expect(grants.allows({ scope: "queue:lease", queue: "{thumbnails}.x" })).toBe(false);
    expect(grants.allows({ scope: "queue:lease", queue: "thumbnails" })).toBe(false);
    expect(grants.allows({ scope: "queue:enqueue", queue: "cache.warmups" })).toBe(true);
    expect(grants.allows({ scope: "queue:enqueue", queue: "cachexwarmups" })).toBe(false);
    expect(grants.allows({ scope: "queue:admin", queue: "job-1" })).toBe(true);
    expect(grants.allows({ scope: "queue:admin", queue: "job-10" })).toBe(false);
    expect(grants.allows({ scope: "queue:admin", queue: "*" })).toBe(false);
    expect(grants.allows({ scope: "queue:lease" })).toBe(true);
    expect(grants.allows({ scope: "sys:job:list" })).toBe(false);
  });

  it("takes a bearer token by its hash; anything else is UNAUTHENTICATED without echoing it", () => {
    const auth = new Authenticator(loadConfig({ SWITCHYARD_AUTH_TOKENS: tokensJson(["queue:enqueue"]) }).auth);
    expect(auth.authenticate(["Bearer s3cret"], undefined).name).toBe("worker");
    expect(auth.authenticate(["bearer   s3cret"], undefined).name).toBe("worker");
    for (const [values, message] of [
      [[], "missing credentials"],
      [["Bearer nope"], "unknown bearer token"],
      [["Basic s3cret"], 'must be "Bearer <token>"'],
      [["Bearer s3cret", "Bearer s3cret"], "not several"],
    ] as const) {
      let thrown: unknown;
      try {
        auth.authenticate(values, undefined);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toMatchObject({ code: "unauthenticated", message: expect.stringContaining(message) });
      expect((thrown as Error).message).not.toContain("s3cret");
    }
  });
});

describe("start-up without authentication", () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  async function startupWarnings(env: Record<string, string>): Promise<string[]> {
    const lines: string[] = [];
    const config = { ...loadConfig({ SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "off", ...env }), redis: redis.target };
    const app = await startApp(config, { clock: new ManualClock(), log: createLogger("warn", (l) => lines.push(l)) });
    await app.stop();
    return lines.map((l) => (JSON.parse(l) as { msg: string }).msg).filter((m) => m.includes("authentication"));
  }

  it("warns when nothing was configured, and not when auth is off on purpose or on", async () => {
    expect(await startupWarnings({})).toEqual([
      "authentication is off: every caller may call every RPC; configure SWITCHYARD_AUTH_TOKENS, or set SWITCHYARD_AUTH=off to say so",
    ]);
    expect(await startupWarnings({ SWITCHYARD_AUTH: "off" })).toEqual([]);
    expect(await startupWarnings({ SWITCHYARD_AUTH_TOKENS: tokensJson(["*"]) })).toEqual([]);
  });
});
