/**
 * The SSRF guard of HTTP job targets (issue 6 "What it must show" 4).
 *
 * The guard's decisions are checked through an injected resolver, without
 * connecting anywhere. End to end, the only servers are on 127.0.0.1, and the
 * only other names resolve (through the injected resolver) to loopback: no
 * test sends traffic to any address but loopback.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { classifyAddress, HttpGuard, parseAllowlist, RefusedDestination, type HostResolver } from "../../src/cron/http-guard.js";
import { loadConfig } from "../../src/config.js";
import { JobRunStatus, type JobLog } from "../../src/gen/switchyard/v1/cron_pb.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

/** A resolver from a fixed table; records every name it was asked for. */
function tableResolver(table: Record<string, string | string[]>): HostResolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = async (host: string) => {
    asked.push(host);
    const answer = table[host];
    if (answer === undefined) throw new Error(`getaddrinfo ENOTFOUND ${host}`);
    return (Array.isArray(answer) ? answer : [answer]).map((address) => ({ address, family: address.includes(":") ? (6 as const) : (4 as const) }));
  };
  return Object.assign(resolve, { asked });
}

const refusal = async (p: Promise<unknown>) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "expected a refusal").toBeInstanceOf(RefusedDestination);
  return (err as Error).message;
};

describe("the guard's decision (injected resolver, no connection)", () => {
  const cases: [string, string][] = [
    ["10.0.0.1", "private"],
    ["172.16.0.1", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "cloud metadata"],
    ["::1", "loopback"],
    ["fc00::1", "unique-local"],
  ];

  for (const [address, label] of cases) {
    it(`refuses a host that resolves to ${address} (${label})`, async () => {
      const resolve = tableResolver({ "internal.example": address });
      const message = await refusal(new HttpGuard([], resolve).destination(new URL("http://internal.example/hook")));
      expect(message).toBe(
        `refused to call http://internal.example: internal.example resolves to ${address}, which is a ${label} address; ` +
          "to call it anyway, add internal.example:80 to SWITCHYARD_HTTP_ALLOW",
      );
      expect(resolve.asked).toEqual(["internal.example"]);
    });

    it(`refuses ${address} written as an address in the URL, without asking DNS`, async () => {
      const resolve = tableResolver({});
      const host = address.includes(":") ? `[${address}]` : address;
      const message = await refusal(new HttpGuard([], resolve).destination(new URL(`https://${host}:8443/`)));
      expect(message).toContain(`${address} is a ${label} address`);
      expect(resolve.asked).toEqual([]);
    });
  }

  it("classifies IPv4 inside IPv6 by the IPv4 address (mapped, NAT64, 6to4)", () => {
    expect(classifyAddress("::ffff:10.0.0.1")).toBe("private");
    expect(classifyAddress("::ffff:7f00:1")).toBe("loopback");
    expect(classifyAddress("64:ff9b::a9fe:a9fe")).toBe("cloud metadata");
    expect(classifyAddress("2002:c0a8:101::1")).toBe("private");
    expect(classifyAddress("fe80::1%eth0")).toBe("link-local");
    expect(classifyAddress("127.1.2.3")).toBe("loopback");
    expect(classifyAddress("100.64.0.1")).toBe("shared (carrier-grade NAT)");
    expect(classifyAddress("0.0.0.0")).toBe("unspecified");
    expect(classifyAddress("93.184.216.34")).toBeUndefined();
    expect(classifyAddress("2606:2800:220:1:248:1893:25c8:1946")).toBeUndefined();
    expect(classifyAddress("::ffff:93.184.216.34")).toBeUndefined();
  });

  it("lets a public address through, and pins the destination to the address it checked", async () => {
    const resolve = tableResolver({ "api.example": "93.184.216.34" });
    const dest = await new HttpGuard([], resolve).destination(new URL("https://api.example/v1"));
    expect(dest).toEqual({ host: "api.example", port: 443, address: "93.184.216.34", family: 4 });
  });

  it("refuses a name when any of its addresses is internal (a round-robin answer cannot smuggle one in)", async () => {
    const resolve = tableResolver({ "mixed.example": ["93.184.216.34", "10.1.2.3"] });
    expect(await refusal(new HttpGuard([], resolve).destination(new URL("http://mixed.example/")))).toContain("10.1.2.3, which is a private address");
  });

  it("refuses schemes other than http and https, and names that do not resolve", async () => {
    const guard = new HttpGuard([], tableResolver({}));
    expect(await refusal(guard.destination(new URL("file:///etc/passwd")))).toContain("only http and https");
    expect(await refusal(guard.destination(new URL("http://nowhere.example/")))).toContain("cannot resolve nowhere.example");
  });

  it("allows what the allowlist names: an address and port, a CIDR, a host name", async () => {
    const allow = parseAllowlist("127.0.0.1:8080, 10.20.0.0/16, [fd00::/8]:443, hooks.internal");
    const resolve = tableResolver({ "hooks.internal": "10.9.9.9", "db.internal": "10.20.3.4", "v6.internal": "fd12::1" });
    const guard = new HttpGuard(allow, resolve);
    expect((await guard.destination(new URL("http://127.0.0.1:8080/"))).address).toBe("127.0.0.1");
    expect(await refusal(guard.destination(new URL("http://127.0.0.1:8081/")))).toContain("127.0.0.1:8081");
    expect((await guard.destination(new URL("http://db.internal:5000/"))).address).toBe("10.20.3.4");
    expect((await guard.destination(new URL("https://v6.internal/"))).address).toBe("fd12::1");
    expect(await refusal(guard.destination(new URL("http://v6.internal/")))).toContain("unique-local");
    expect((await guard.destination(new URL("http://hooks.internal:1234/"))).address).toBe("10.9.9.9");
    expect(() => parseAllowlist("10.0.0.0/33")).toThrow(/SWITCHYARD_HTTP_ALLOW entry "10.0.0.0\/33"/);
    expect(() => parseAllowlist("host:port")).toThrow(/SWITCHYARD_HTTP_ALLOW/);
    expect(() => loadConfig({ SWITCHYARD_HTTP_ALLOW: "127.0.0.1:99999" })).toThrow(/\[::1\]:8080/);
  });
});

interface Local {
  server: Server;
  port: number;
  requests: { url: string; host: string }[];
}

async function localServer(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Local> {
  const requests: Local["requests"] = [];
  const server = createServer((req, res) => {
    requests.push({ url: req.url ?? "", host: req.headers.host ?? "" });
    handler(req, res);
  });
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  return { server, port: (server.address() as AddressInfo).port, requests };
}

describe("HTTP targets end to end", () => {
  let redis: TestRedis;
  let sy: TestSwitchyard;
  let allowed: Local;
  let forbidden: Local;
  let resolve: ReturnType<typeof tableResolver>;
  let rebinding = 0;

  beforeAll(async () => {
    forbidden = await localServer((_req, res) => res.writeHead(200).end("you should never see this"));
    allowed = await localServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://x");
      if (url.pathname === "/ok") res.writeHead(200).end(`ok from ${req.headers.host}`);
      else if (url.pathname === "/to-forbidden") res.writeHead(302, { location: `http://127.0.0.1:${forbidden.port}/stolen` }).end();
      else if (url.pathname === "/to-localhost") res.writeHead(307, { location: `http://localhost:${forbidden.port}/stolen` }).end();
      else if (url.pathname === "/loop") res.writeHead(302, { location: "/loop" }).end();
      else if (url.pathname === "/to-ok") res.writeHead(303, { location: "/ok" }).end();
      else res.writeHead(404).end();
    });
    resolve = tableResolver({ localhost: "127.0.0.1", "hooks.example": "127.0.0.1" });
    // A name whose answer changes after the first lookup, as a rebinding attack's would: the guard
    // must connect to the address it checked, not ask again.
    const rebind: HostResolver = async (host) => {
      if (host !== "rebind.example") return resolve(host);
      return [{ address: rebinding++ === 0 ? "127.0.0.1" : "127.0.0.2", family: 4 }];
    };
    redis = await startRedis();
    sy = await startSwitchyard(redis, {
      env: { SWITCHYARD_HTTP_ALLOW: `127.0.0.1:${allowed.port}` },
      resolveHost: rebind,
    });
  });
  afterAll(async () => {
    await sy?.stop();
    await redis?.stop();
    for (const s of [allowed, forbidden]) {
      s?.server.closeAllConnections();
      await new Promise<void>((ok) => (s ? s.server.close(() => ok()) : ok()));
    }
  });

  async function run(target: string, params = ""): Promise<JobLog> {
    const job = await sy.client.createJob({ name: target, target, params, schedule: "0 0 3 * * *" });
    const runId = await sy.client.runOnce(job.id);
    await expect.poll(async () => (await sy.client.listJobLogs(job.id)).logs.map((l) => l.id), { timeout: 10_000 }).toContain(runId);
    return (await sy.client.listJobLogs(job.id)).logs.find((l) => l.id === runId)!;
  }

  it("refuses a local server that is not allowlisted, and it sees no request", async () => {
    const entry = await run(`http://127.0.0.1:${forbidden.port}/direct`);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("127.0.0.1 is a loopback address");
    expect(entry.error).toContain(`SWITCHYARD_HTTP_ALLOW`);
    const byName = await run(`http://localhost:${forbidden.port}/by-name`);
    expect(byName.error).toContain("localhost resolves to 127.0.0.1, which is a loopback address");
    expect(forbidden.requests).toEqual([]);
  });

  it("refuses a redirect from an allowlisted server to a loopback address that is not", async () => {
    const before = allowed.requests.length;
    const entry = await run(`http://127.0.0.1:${allowed.port}/to-forbidden`);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain(`refused to call http://127.0.0.1:${forbidden.port}`);
    const viaName = await run(`http://127.0.0.1:${allowed.port}/to-localhost`, '{"a":1}');
    expect(viaName.error).toContain("localhost resolves to 127.0.0.1");
    expect(allowed.requests.slice(before).map((r) => r.url)).toEqual(["/to-forbidden", "/to-localhost"]);
    expect(forbidden.requests).toEqual([]);
  });

  it("calls an allowlisted server, following an allowed redirect", async () => {
    const entry = await run(`http://127.0.0.1:${allowed.port}/ok`);
    expect(entry.status).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toBe(`HTTP 200: ok from 127.0.0.1:${allowed.port}`);
    const redirected = await run(`http://127.0.0.1:${allowed.port}/to-ok`, '{"b":2}');
    expect(redirected.status).toBe(JobRunStatus.SUCCEEDED);
  });

  it("connects to the address it checked, whatever a second lookup would say (DNS rebinding)", async () => {
    const entry = await run(`http://rebind.example:${allowed.port}/ok`);
    expect(entry.status, entry.error).toBe(JobRunStatus.SUCCEEDED);
    expect(entry.message).toBe(`HTTP 200: ok from rebind.example:${allowed.port}`);
    expect(rebinding).toBe(1);
  });

  it("gives up after 5 redirects", async () => {
    const before = allowed.requests.length;
    const entry = await run(`http://127.0.0.1:${allowed.port}/loop`);
    expect(entry.status).toBe(JobRunStatus.FAILED);
    expect(entry.error).toContain("more than 5 redirects");
    expect(allowed.requests.length - before).toBe(6);
  });
});
