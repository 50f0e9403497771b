/**
 * docs/worker-protocol.md against the code it describes: the numbers it quotes
 * are the server's defaults, every message kind of the Lease stream and every
 * field a worker meets is in it, and the statuses it says to stop on are the
 * ones the Python and Go workers stop on. (The behaviour itself is shown by the clients' suites and the proxy test.)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { defaults } from "../../src/config.js";
import { DEFAULT_WORKER_MESSAGE_BYTES, MIN_WORKER_MESSAGE_BYTES } from "../../src/grpc/queue-service.js";
import {
  AckRequestSchema,
  DeliverySchema,
  DrainSchema,
  DropRequestSchema,
  LeaseOpenedSchema,
  LeaseOpenSchema,
  LeaseRequestSchema,
  LeaseResponseSchema,
  RetryRequestSchema,
  SettleResultSchema,
} from "../../src/gen/switchyard/v1/queue_pb.js";

const root = join(import.meta.dirname, "..", "..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const doc = read("docs/worker-protocol.md");

/** The number a phrase of the document quotes, e.g. "`SWITCHYARD_MAX_CREDIT` (10,000)" → 10000. */
function quoted(pattern: RegExp): number {
  const m = pattern.exec(doc);
  if (!m) throw new Error(`docs/worker-protocol.md no longer says ${pattern}`);
  return Number(m[1].replace(/,/g, ""));
}

describe("docs/worker-protocol.md", () => {
  it("quotes the server's defaults", () => {
    expect(quoted(/`SWITCHYARD_MAX_CREDIT` \(([\d,]+)\)/)).toBe(defaults.maxCredit);
    expect(quoted(/`SWITCHYARD_LEASE_BATCH` \((\d+)\)/)).toBe(defaults.leaseBatch);
    expect(quoted(/`SWITCHYARD_MAX_MESSAGE_BYTES` \((\d+) MiB\)/) * 2 ** 20).toBe(defaults.maxMessageBytes);
    expect(quoted(/`SWITCHYARD_MAX_PAYLOAD_BYTES` \((\d+) MiB\)/) * 2 ** 20).toBe(defaults.maxPayloadBytes);
    expect(quoted(/`SWITCHYARD_HEARTBEAT_INTERVAL`, default (\d+) s/) * 1000).toBe(defaults.heartbeatIntervalMs);
    expect(quoted(/`SWITCHYARD_SHUTDOWN_GRACE`, default (\d+) s/) * 1000).toBe(defaults.shutdownGraceMs);
    expect(quoted(/`SWITCHYARD_MAX_STREAMS_PER_CONNECTION` \((\d+)\)/)).toBe(defaults.maxStreamsPerConnection);
    expect(quoted(/`SWITCHYARD_CONNECTION_IDLE_TIMEOUT` \((\d+) min\)/) * 60_000).toBe(defaults.connectionIdleTimeoutMs);
    expect(quoted(/`SWITCHYARD_LEASE_OPEN_TIMEOUT` \((\d+) s\)/) * 1000).toBe(defaults.leaseOpenTimeoutMs);
    expect(quoted(/`SWITCHYARD_LEASE_STREAM_BUFFER_BYTES` \((\d+) MiB/) * 2 ** 20).toBe(defaults.maxStreamBufferBytes);
    expect(quoted(/`max_message_bytes` under (\d+) KiB/) * 1024).toBe(MIN_WORKER_MESSAGE_BYTES);
    expect(quoted(/0 means gRPC's default, (\d+) MiB/) * 2 ** 20).toBe(DEFAULT_WORKER_MESSAGE_BYTES);
    const ping = /"grpc\.http2\.min_ping_interval_without_data_ms": ([\d_]+)/.exec(read("src/grpc/server.ts"))!;
    expect(quoted(/no\s+more often than one per (\d+) s/) * 1000).toBe(Number(ping[1].replace(/_/g, "")));
  });

  it("covers every message kind of the Lease stream, both ways", () => {
    const kinds = [...LeaseRequestSchema.oneofs[0].fields, ...LeaseResponseSchema.oneofs[0].fields].map((f) => f.name);
    expect(kinds.length).toBeGreaterThanOrEqual(12);
    for (const kind of kinds) expect(doc, `the document never shows \`${kind}\``).toMatch(new RegExp("`" + kind + "[ `]"));
  });

  it("names every field a worker reads or sends on the stream", () => {
    const schemas = [LeaseOpenSchema, LeaseOpenedSchema, DeliverySchema, RetryRequestSchema, DropRequestSchema, AckRequestSchema, SettleResultSchema, DrainSchema];
    for (const schema of schemas) {
      for (const field of schema.fields) expect(doc, `${schema.typeName}.${field.name} is not in the document`).toContain(field.name);
    }
  });

  it("names the same statuses to stop on as the Python and Go workers", () => {
    const row = doc.split("\n").find((l) => l.includes("stop and report; retrying cannot help"))!;
    const documented = [...row.matchAll(/`([A-Z_]+)`/g)].map((m) => m[1]).sort();
    const python = [...read("clients/python/src/switchyard/errors.py").matchAll(/grpc\.StatusCode\.([A-Z_]+),/g)].map((m) => m[1]).sort();
    const goFatal = /func Fatal\(err error\) bool \{[\s\S]*?\n\}/.exec(read("clients/go/worker/worker.go"))![0];
    const go = [...goFatal.matchAll(/codes\.(\w+)/g)].map((m) => m[1].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()).sort();
    expect(documented.length).toBeGreaterThanOrEqual(5);
    expect(python).toEqual(documented);
    expect(go).toEqual(documented);
  });
});
