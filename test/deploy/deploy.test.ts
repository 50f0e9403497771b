/**
 * The deployment files agree with what the service does: the termination
 * period covers the shutdown grace, the probes point at real endpoints, the
 * ConfigMap's queue file is one the service accepts, and the mesh settings keep
 * Lease streams open (no route timeout, idle timeouts above the heartbeat).
 */
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { parseDuration } from "../../src/config.js";
import { QueueSchema } from "../../src/gen/switchyard/v1/queue_pb.js";
import { queueSpec } from "../../src/grpc/convert.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const k8s = read("deploy/kubernetes.yaml");
const istio = read("deploy/istio.yaml");
const envoy = read("deploy/envoy.yaml");

/** The value of `key: value` in the ConfigMap's data. */
function setting(key: string): string {
  const m = new RegExp(`^  ${key}: (\\S+)$`, "m").exec(k8s);
  if (!m) throw new Error(`deploy/kubernetes.yaml sets no ${key}`);
  return m[1];
}

const heartbeatMs = parseDuration("SWITCHYARD_HEARTBEAT_INTERVAL", setting("SWITCHYARD_HEARTBEAT_INTERVAL"));

describe("deploy/kubernetes.yaml", () => {
  it("waits longer for a pod than its preStop pause and its shutdown grace together", () => {
    const period = Number(/terminationGracePeriodSeconds: (\d+)/.exec(k8s)![1]) * 1000;
    const grace = parseDuration("SWITCHYARD_SHUTDOWN_GRACE", setting("SWITCHYARD_SHUTDOWN_GRACE"));
    const preStop = Number(/command: \["sleep", "(\d+)"\]/.exec(k8s)![1]) * 1000;
    expect(period).toBeGreaterThan(grace + preStop);
  });

  it("listens where the probes and the Service look", () => {
    expect(setting("SWITCHYARD_GRPC_ADDRESS")).toBe("0.0.0.0:50051");
    expect(setting("SWITCHYARD_HTTP_ADDRESS")).toBe("0.0.0.0:9090");
    expect(k8s).toMatch(/readinessProbe:\n\s+grpc: \{ port: 50051, service: switchyard\.v1\.QueueService \}/);
    expect(k8s).toMatch(/livenessProbe:\n\s+httpGet: \{ path: \/healthz, port: http-metrics \}/);
    expect(k8s).toContain("{ name: http-metrics, containerPort: 9090 }");
    expect(k8s).toContain("{ name: grpc, port: 50051, targetPort: grpc, appProtocol: grpc }");
    expect(k8s).toContain('prometheus.io/port: "9090"');
  });

  it("declares queues the service accepts", () => {
    const block = /switchyard\.json: \|\n((?: {4}.*\n)+)/.exec(k8s)![1];
    const file = JSON.parse(block) as { queues: JsonValue[] };
    expect(file.queues.length).toBeGreaterThan(0);
    for (const q of file.queues) expect(() => validateQueueSpec(queueSpec(fromJson(QueueSchema, q)), 0)).not.toThrow();
    expect(setting("SWITCHYARD_CONFIG_FILE")).toBe("/etc/switchyard/switchyard.json");
  });

  it("rebalances lease streams with a max connection age", () => {
    expect(parseDuration("SWITCHYARD_MAX_CONNECTION_AGE", setting("SWITCHYARD_MAX_CONNECTION_AGE"))).toBeGreaterThan(0);
  });
});

describe("mesh settings", () => {
  it("istio: Lease is routed first, with the route timeout off; idle timeouts exceed the heartbeat", () => {
    const lease = istio.indexOf("exact: /switchyard.v1.QueueService/Lease");
    const unary = istio.indexOf("name: unary");
    expect(lease).toBeGreaterThan(0);
    expect(lease).toBeLessThan(unary);
    expect(istio.slice(lease, unary)).toMatch(/\n\s+timeout: 0s\n/);
    for (const [, d] of istio.matchAll(/(?:idleTimeout|stream_idle_timeout): (\d+s)/g)) {
      expect(parseDuration("idle timeout", d)).toBeGreaterThan(heartbeatMs);
    }
  });

  it("envoy: Lease has no route timeout; every idle timeout exceeds the heartbeat", () => {
    expect(envoy).toContain("- match: { path: /switchyard.v1.QueueService/Lease }\n                          route: { cluster: switchyard, timeout: 0s");
    const idle = [...envoy.matchAll(/idle_timeout: (\d+s)/g)].map((m) => parseDuration("idle timeout", m[1]));
    expect(idle.length).toBeGreaterThanOrEqual(3);
    for (const ms of idle) expect(ms).toBeGreaterThan(heartbeatMs);
  });
});

describe("Dockerfile", () => {
  it("serves gRPC and the side port on all interfaces, as a non-root user", () => {
    const docker = read("Dockerfile");
    expect(docker).toContain("SWITCHYARD_GRPC_ADDRESS=0.0.0.0:50051");
    expect(docker).toContain("SWITCHYARD_HTTP_ADDRESS=0.0.0.0:9090");
    expect(docker).toContain("EXPOSE 50051 9090");
    expect(docker).toMatch(/^USER node$/m);
  });
});
