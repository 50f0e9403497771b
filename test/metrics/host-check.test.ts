/**
 * The side port answers only requests that name a host it serves (DNS
 * rebinding: auth is off by default, and a page on attacker.example whose
 * name now resolves to 127.0.0.1 must not read the dashboard's API or the
 * metrics from a victim's browser).
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { useSwitchyard } from "../helpers/switchyard.js";
import { send } from "../helpers/http.js";

const t = useSwitchyard({ env: { SWITCHYARD_HTTP_HOSTS: "switchyard.internal, Ops.Example.com." } });

describe("the side port's Host check", () => {
  it("refuses a host name it does not serve, on every path, with 403 and what to configure", async () => {
    const http = t.sy.app.httpAddress;
    for (const path of ["/metrics", "/readyz", "/dashboard/", "/api/switchyard.v1.QueueService/ListQueues"]) {
      const res = await send(http, { method: path.startsWith("/api/") ? "POST" : "GET", path, headers: { host: "attacker.example:9090", "content-type": "application/json" } });
      expect(res.status, path).toBe(403);
      expect(res.body).toBe('host "attacker.example" is not served here: use an IP address or localhost, or list the name in SWITCHYARD_HTTP_HOSTS\n');
    }
  });

  it("serves IP addresses, localhost and the names in SWITCHYARD_HTTP_HOSTS, with or without a port", async () => {
    const http = t.sy.app.httpAddress;
    for (const host of ["127.0.0.1:9090", "10.1.2.3", "[::1]:9090", "localhost:9090", "LOCALHOST", "switchyard.internal", "ops.example.com:80"]) {
      expect((await send(http, { path: "/healthz", headers: { host } })).status, host).toBe(200);
    }
  });

  it("refuses a SWITCHYARD_HTTP_HOSTS entry that is not a host name", () => {
    expect(() => loadConfig({ SWITCHYARD_HTTP_HOSTS: "example.com:80" })).toThrow(/SWITCHYARD_HTTP_HOSTS entry "example.com:80" is not a host name/);
  });
});
