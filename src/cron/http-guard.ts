/**
 * The SSRF guard of HTTP job targets. A job's URL is refused when its host is,
 * or resolves to, an address inside the company's network or the host itself:
 * loopback, private, shared (CGNAT), link-local, unique-local, multicast,
 * reserved, and the cloud metadata endpoints. An allowlist lets named hosts,
 * addresses or ranges (optionally one port) through.
 *
 * The guard decides on the addresses it resolved itself, and the caller then
 * connects to exactly the address it returns: a DNS answer that changes between
 * the check and the connection (rebinding) cannot move the request elsewhere.
 */
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { invalid } from "../errors.js";

/** One resolved address. */
export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to its addresses (injected in tests; the system resolver by default). */
export type HostResolver = (hostname: string) => Promise<ResolvedAddress[]>;

/** The system resolver (getaddrinfo, as a connection would use). */
export const systemResolver: HostResolver = async (hostname) =>
  (await lookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

/** One allowlist entry: a host name, or an address range; and a port, or any. */
export interface AllowRule {
  readonly text: string;
  readonly host?: string;
  readonly range?: { family: 4 | 6; bits: bigint; prefix: number };
  /** 0: any port. */
  readonly port: number;
}

/** Where to connect for one URL: the host (for the Host header and TLS) and the checked address. */
export interface Destination {
  host: string;
  port: number;
  address: string;
  family: 4 | 6;
}

/** A request the guard refuses; the message says why and how to allow it. */
export class RefusedDestination extends Error {
  override readonly name = "RefusedDestination";
}

function ipv4Bits(text: string): bigint {
  return text.split(".").reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function ipv6Bits(text: string): bigint {
  let a = text.split("%")[0];
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (v4) {
    const n = ipv4Bits(v4[1]);
    a = `${a.slice(0, -v4[1].length)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, tail] = a.split("::");
  const words = (s: string | undefined) => (s ? s.split(":") : []);
  const h = words(head);
  const t = words(tail);
  const all = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill("0"), ...t];
  return all.reduce((acc, w) => (acc << 16n) | BigInt(parseInt(w, 16)), 0n);
}

function cidr(text: string): { family: 4 | 6; bits: bigint; prefix: number } {
  const [address, len] = text.split("/");
  const family = isIP(address) === 6 ? 6 : 4;
  const width = family === 4 ? 32 : 128;
  const prefix = len === undefined ? width : Number(len);
  return { family, bits: family === 4 ? ipv4Bits(address) : ipv6Bits(address), prefix };
}

function inRange(range: { family: 4 | 6; bits: bigint; prefix: number }, family: 4 | 6, bits: bigint): boolean {
  if (range.family !== family) return false;
  const shift = BigInt((family === 4 ? 32 : 128) - range.prefix);
  return bits >> shift === range.bits >> shift;
}

/** Ranges refused by default, most specific first. */
const blocked: [string, string][] = [
  ["169.254.169.254", "cloud metadata"],
  ["169.254.170.2", "cloud metadata"],
  ["169.254.170.23", "cloud metadata"],
  ["100.100.100.200", "cloud metadata"],
  ["168.63.129.16", "cloud metadata"],
  ["192.0.0.192", "cloud metadata"],
  ["fd00:ec2::254", "cloud metadata"],
  ["fd00:ec2::23", "cloud metadata"],
  ["0.0.0.0/8", "unspecified"],
  ["10.0.0.0/8", "private"],
  ["100.64.0.0/10", "shared (carrier-grade NAT)"],
  ["127.0.0.0/8", "loopback"],
  ["169.254.0.0/16", "link-local"],
  ["172.16.0.0/12", "private"],
  ["192.0.0.0/24", "reserved"],
  ["192.0.2.0/24", "reserved"],
  ["192.168.0.0/16", "private"],
  ["198.18.0.0/15", "reserved"],
  ["198.51.100.0/24", "reserved"],
  ["203.0.113.0/24", "reserved"],
  ["224.0.0.0/4", "multicast"],
  ["240.0.0.0/4", "reserved"],
  ["::/128", "unspecified"],
  ["::1/128", "loopback"],
  ["::/96", "reserved"],
  ["64:ff9b:1::/48", "private"],
  ["100::/64", "reserved"],
  ["2001:db8::/32", "reserved"],
  ["fc00::/7", "unique-local"],
  ["fe80::/10", "link-local"],
  ["fec0::/10", "site-local"],
  ["ff00::/8", "multicast"],
];
const blockedRanges = blocked.map(([range, label]) => ({ range: cidr(range), label }));

/** IPv6 forms that carry an IPv4 address: mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96), 6to4 (2002::/16). */
function embeddedIpv4(bits: bigint): bigint | undefined {
  if (bits >> 32n === 0xffffn) return bits & 0xffffffffn;
  if (bits >> 32n === 0x64ff9b0000000000000000n) return bits & 0xffffffffn;
  if (bits >> 112n === 0x2002n) return (bits >> 80n) & 0xffffffffn;
  return undefined;
}

/** The address as (family, bits), IPv4 inside IPv6 unwrapped. */
function normalise(address: string): { family: 4 | 6; bits: bigint } {
  if (isIP(address) === 4) return { family: 4, bits: ipv4Bits(address) };
  const bits = ipv6Bits(address);
  const v4 = embeddedIpv4(bits);
  return v4 === undefined ? { family: 6, bits } : { family: 4, bits: v4 };
}

/** Why `address` is refused by default ("loopback", "private", ...), or undefined for a public address. */
export function classifyAddress(address: string): string | undefined {
  const { family, bits } = normalise(address);
  return blockedRanges.find((b) => inRange(b.range, family, bits))?.label;
}

/**
 * Parses SWITCHYARD_HTTP_ALLOW: comma-separated `host`, `host:port`,
 * `address`, `address:port`, `cidr`, `cidr:port`; IPv6 in brackets when a port
 * follows (`[::1]:8080`, `[fd00::/8]:443`).
 */
export function parseAllowlist(text: string, variable = "SWITCHYARD_HTTP_ALLOW"): AllowRule[] {
  return text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "")
    .map((entry) => {
      const fail = () =>
        invalid(`${variable} entry "${entry}" is not host[:port], address[:port] or cidr[:port] (IPv6 in brackets before a port: [::1]:8080)`);
      let target = entry;
      let port = 0;
      const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
      const withPort = /^([^:]+):(\d+)$/.exec(entry);
      if (bracketed) [target, port] = [bracketed[1], Number(bracketed[2] ?? 0)];
      else if (withPort) [target, port] = [withPort[1], Number(withPort[2])];
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw fail();
      const [address, len] = target.split("/");
      const family = isIP(address);
      if (family) {
        const width = family === 4 ? 32 : 128;
        if (len !== undefined && (!/^\d+$/.test(len) || Number(len) > width)) throw fail();
        return { text: entry, range: cidr(target), port };
      }
      if (len !== undefined || !/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(target)) throw fail();
      return { text: entry, host: target.toLowerCase(), port };
    });
}

/** Checks HTTP targets against the default refusals and the allowlist. */
export class HttpGuard {
  constructor(
    private readonly allow: readonly AllowRule[] = [],
    private readonly resolve: HostResolver = systemResolver,
  ) {}

  private allowedHost(host: string, port: number): boolean {
    return this.allow.some((r) => r.host === host && (r.port === 0 || r.port === port));
  }

  private allowedAddress(address: string, port: number): boolean {
    const { family, bits } = normalise(address);
    return this.allow.some((r) => r.range && inRange(r.range, family, bits) && (r.port === 0 || r.port === port));
  }

  /**
   * Where a request to `url` may connect, or a RefusedDestination. Every
   * address the host resolves to must pass (unless the host itself is allowed),
   * so no answer in a round-robin set can reach an internal address.
   */
  async destination(url: URL): Promise<Destination> {
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new RefusedDestination(`refused ${url.protocol}// URL: only http and https targets are called`);
    }
    const host = url.hostname.replace(/^\[|\]$/g, "").replace(/\.$/, "").toLowerCase();
    const port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
    let addresses: ResolvedAddress[];
    const family = isIP(host);
    if (family) addresses = [{ address: host, family: family === 6 ? 6 : 4 }];
    else {
      try {
        addresses = await this.resolve(host);
      } catch (err) {
        throw new RefusedDestination(`cannot resolve ${host}: ${err instanceof Error ? err.message : String(err)}`);
      }
      if (addresses.length === 0) throw new RefusedDestination(`cannot resolve ${host}: no addresses`);
    }
    if (!this.allowedHost(host, port)) {
      for (const { address } of addresses) {
        const label = classifyAddress(address);
        if (label === undefined || this.allowedAddress(address, port)) continue;
        const subject = family ? `${host} is` : `${host} resolves to ${address}, which is`;
        throw new RefusedDestination(
          `refused to call ${url.protocol}//${url.host}: ${subject} a ${label} address; ` +
            `to call it anyway, add ${family === 6 ? `[${host}]` : host}:${port} to SWITCHYARD_HTTP_ALLOW`,
        );
      }
    }
    return { host, port, ...addresses[0] };
  }
}
