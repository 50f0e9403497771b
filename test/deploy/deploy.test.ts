/**
 * The deployment files agree with what the service does, read as data: the
 * termination period and the mesh's drain cover the shutdown grace, the probes
 * point at real endpoints, the queue file is one the service accepts, every
 * write goes to a writable volume, auth is on with its tokens from a Secret,
 * the mesh keeps Lease streams open and retries only what is safe to repeat,
 * and the image runs a Node LTS that is still supported.
 * (test/deploy/read-only.test.ts runs the server as these files configure it.)
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fromJson, type DescService, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { loadConfig, parseDuration } from "../../src/config.js";
import { AuditService } from "../../src/gen/switchyard/v1/audit_pb.js";
import { AuthService } from "../../src/gen/switchyard/v1/auth_pb.js";
import { CronService } from "../../src/gen/switchyard/v1/cron_pb.js";
import { QueueSchema, QueueService } from "../../src/gen/switchyard/v1/queue_pb.js";
import { queueSpec } from "../../src/grpc/convert.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { readYaml } from "../helpers/yaml.js";
import { compose, kubernetes, type Container } from "./manifests.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const seconds = (d: string) => parseDuration("duration", d);

const k8s = kubernetes();
const heartbeatMs = seconds(k8s.env.SWITCHYARD_HEARTBEAT_INTERVAL);
const graceMs = seconds(k8s.env.SWITCHYARD_SHUTDOWN_GRACE);

function expectValidQueueFile(json: string): void {
  const file = JSON.parse(json) as { queues: JsonValue[] };
  expect(file.queues.length).toBeGreaterThan(0);
  for (const q of file.queues) expect(() => validateQueueSpec(queueSpec(fromJson(QueueSchema, q)), 0)).not.toThrow();
}

/** Every path the server may write to, in the container: TMPDIR, and the data folder of the embedded Redis. */
function writablePathsNeeded(c: Container): string[] {
  const embedded = !c.env.SWITCHYARD_REDIS_URL && !c.env.SWITCHYARD_REDIS_CLUSTER_NODES && !c.env.SWITCHYARD_REDIS_SENTINELS;
  return [c.env.TMPDIR ?? "/tmp", ...(embedded ? [c.env.SWITCHYARD_DATA_DIR ?? "/app/.switchyard-data"] : [])];
}

describe("deploy/kubernetes.yaml", () => {
  it("waits longer for a pod than its preStop pause, its shutdown grace and the sidecar's drain", () => {
    expect(k8s.terminationGraceMs).toBeGreaterThan(graceMs + k8s.preStopMs);
    // The server forces its last calls shut a second after the grace (app.ts); the sidecar must carry them until then.
    expect(k8s.meshDrainMs).toBeGreaterThanOrEqual(k8s.preStopMs + graceMs + 1000);
    expect(k8s.terminationGraceMs).toBeGreaterThan(k8s.meshDrainMs);
  });

  it("writes only to writable volumes under a read-only root filesystem", () => {
    expect(k8s.container.readOnlyRootFilesystem).toBe(true);
    for (const path of writablePathsNeeded(k8s.container)) {
      const mount = k8s.container.mounts.find((m) => m.path === path);
      expect(mount, `${path} must be a writable volume`).toMatchObject({ writable: true, kind: "emptyDir" });
    }
  });

  it("turns authentication on, with the tokens from a Secret", () => {
    expect(k8s.env.SWITCHYARD_AUTH).toBe("on");
    const tokens = k8s.env.SWITCHYARD_AUTH_TOKENS;
    const mount = k8s.container.mounts.find((m) => tokens.startsWith(`${m.path}/`));
    expect(mount).toMatchObject({ kind: "secret", writable: false });
    expect(mount!.files).toContain(tokens.slice(mount!.path.length + 1));
  });

  it("holds only strings in its ConfigMap (YAML reads a bare on as true)", () => {
    for (const [k, v] of Object.entries(k8s.configMap)) expect(typeof v, k).toBe("string");
  });

  it("listens where the probes and the Service look", () => {
    expect(k8s.env.SWITCHYARD_GRPC_ADDRESS).toBe("0.0.0.0:50051");
    expect(k8s.env.SWITCHYARD_HTTP_ADDRESS).toBe("0.0.0.0:9090");
    expect(k8s.container.raw.readinessProbe).toMatchObject({ grpc: { port: 50051, service: "switchyard.v1.QueueService" } });
    expect(k8s.container.raw.livenessProbe).toMatchObject({ httpGet: { path: "/healthz", port: "http-metrics" } });
    expect(k8s.container.raw.ports).toEqual(expect.arrayContaining([{ name: "http-metrics", containerPort: 9090 }]));
    expect(k8s.service.spec.ports).toEqual(expect.arrayContaining([{ name: "grpc", port: 50051, targetPort: "grpc", appProtocol: "grpc" }]));
    expect(k8s.podAnnotations["prometheus.io/port"]).toBe("9090");
  });

  it("declares queues the service accepts", () => {
    expectValidQueueFile(k8s.configMap["switchyard.json"]);
    expect(k8s.env.SWITCHYARD_CONFIG_FILE).toBe("/etc/switchyard/switchyard.json");
  });

  it("rebalances lease streams with a max connection age", () => {
    expect(seconds(k8s.env.SWITCHYARD_MAX_CONNECTION_AGE)).toBeGreaterThan(0);
  });
});

/** Every RPC path of the API, with whether repeating it is harmless. */
function methods(): { path: string; stream: boolean; safe: boolean }[] {
  const safe = new Set([
    "QueueService/GetQueue", "QueueService/ListQueues", "QueueService/GetQueueStats", "QueueService/PeekQueue",
    "QueueService/Ack", "QueueService/Retry", "QueueService/Drop", "QueueService/ExtendLease",
    "CronService/GetJob", "CronService/ListJobs", "CronService/ListJobLogs", "CronService/GetSchedulerStatus", "CronService/PreviewSchedule",
    "AuditService/ListAuditLogs", "AuthService/GetCaller",
  ]);
  const services: DescService[] = [QueueService, CronService, AuditService, AuthService];
  return services.flatMap((s) =>
    s.methods.map((m) => ({
      path: `/${s.typeName}/${m.name}`,
      stream: m.methodKind !== "unary",
      safe: safe.has(`${s.name}/${m.name}`),
    })),
  );
}

/** What a proxy does with a call: its route timeout (0: none) and the conditions it retries on (none: []). */
interface RoutePolicy {
  timeout: string;
  retryOn: string[];
}

function expectSafeRetries(policy: (path: string) => RoutePolicy): void {
  const all = methods();
  expect(all.find((m) => m.path === "/switchyard.v1.QueueService/Enqueue")).toMatchObject({ safe: false, stream: false });
  for (const m of all) {
    const p = policy(m.path);
    if (m.stream) {
      expect(p, m.path).toEqual({ timeout: "0s", retryOn: [] });
    } else if (!m.safe) {
      // A call that may have done its work must not run again: only failures before it reached the server.
      for (const on of p.retryOn) expect(["connect-failure", "refused-stream"], `${m.path} retries on ${on}`).toContain(on);
    }
  }
  expect(policy("/switchyard.v1.QueueService/Ack").retryOn).toContain("unavailable");
}

describe("deploy/istio.yaml", () => {
  const [virtualService, destinationRule, envoyFilter] = readYaml(join(root, "deploy/istio.yaml")) as Record<string, any>[]; // eslint-disable-line @typescript-eslint/no-explicit-any
  const routeFor = (path: string) =>
    (virtualService.spec.http as Record<string, any>[]).find((r) => // eslint-disable-line @typescript-eslint/no-explicit-any
      !r.match ||
      (r.match as { uri: { exact?: string; prefix?: string; regex?: string } }[]).some(({ uri }) =>
        uri.exact !== undefined ? uri.exact === path : uri.prefix !== undefined ? path.startsWith(uri.prefix) : new RegExp(`^(?:${uri.regex})$`).test(path),
      ),
    )!;

  it("never retries streams or writes on UNAVAILABLE, and keeps streams free of a route timeout", () => {
    expectSafeRetries((path) => {
      const r = routeFor(path);
      return { timeout: r.timeout, retryOn: r.retries.attempts > 0 ? String(r.retries.retryOn).split(",") : [] };
    });
  });

  it("keeps every idle timeout above the heartbeat", () => {
    expect(seconds(destinationRule.spec.trafficPolicy.connectionPool.http.idleTimeout)).toBeGreaterThan(heartbeatMs);
    expect(seconds(envoyFilter.spec.configPatches[0].patch.value.typed_config.stream_idle_timeout)).toBeGreaterThan(heartbeatMs);
  });
});

describe("deploy/envoy.yaml", () => {
  const [config] = readYaml(join(root, "deploy/envoy.yaml")) as Record<string, any>[]; // eslint-disable-line @typescript-eslint/no-explicit-any
  const hcm = config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  const routes = hcm.route_config.virtual_hosts[0].routes as { match: { path?: string; prefix?: string; safe_regex?: { regex: string } }; route: any }[]; // eslint-disable-line @typescript-eslint/no-explicit-any

  it("never retries streams or writes on UNAVAILABLE, and keeps streams free of a route timeout", () => {
    expectSafeRetries((path) => {
      const { route } = routes.find(({ match: m }) =>
        m.path !== undefined ? m.path === path : m.prefix !== undefined ? path.startsWith(m.prefix) : new RegExp(`^(?:${m.safe_regex!.regex})$`).test(path),
      )!;
      return { timeout: route.timeout, retryOn: route.retry_policy ? String(route.retry_policy.retry_on).split(",") : [] };
    });
  });

  it("keeps every idle timeout above the heartbeat", () => {
    const idle = [hcm.stream_idle_timeout, hcm.common_http_protocol_options.idle_timeout, ...routes.map((r) => r.route.idle_timeout).filter(Boolean)];
    const upstream = config.static_resources.clusters[0].typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    idle.push(upstream.common_http_protocol_options.idle_timeout);
    expect(idle.length).toBeGreaterThanOrEqual(5);
    for (const d of idle) expect(seconds(d)).toBeGreaterThan(heartbeatMs);
  });
});

describe("docker-compose.yml", () => {
  const c = compose();

  it("runs read-only, writing only to a tmpfs, with auth on and the tokens from a secret file", () => {
    expect(c.container.readOnlyRootFilesystem).toBe(true);
    for (const path of writablePathsNeeded(c.container)) {
      expect(c.container.mounts.find((m) => m.path === path), path).toMatchObject({ writable: true, kind: "tmpfs" });
    }
    expect(c.env.SWITCHYARD_AUTH).toBe("on");
    const tokens = c.container.mounts.find((m) => m.path === c.env.SWITCHYARD_AUTH_TOKENS);
    expect(tokens).toMatchObject({ kind: "secret", writable: false });
    expect(loadConfig({ SWITCHYARD_AUTH: "on", SWITCHYARD_AUTH_TOKENS: tokens!.hostPath }).auth.tokens.map((t) => t.name)).toEqual(["compose-dev"]);
  });

  it("gives the drain time to finish before Docker kills the container, and listens on loopback only", () => {
    expect(seconds(c.service.stop_grace_period)).toBeGreaterThan(seconds(c.env.SWITCHYARD_SHUTDOWN_GRACE) + 1000);
    for (const port of c.service.ports as string[]) expect(port).toMatch(/^127\.0\.0\.1:/);
  });

  it("points at its own Redis, once that answers, and declares queues the service accepts", () => {
    const redisHost = new URL(c.env.SWITCHYARD_REDIS_URL).hostname;
    expect(Object.keys(c.file.services)).toContain(redisHost);
    expect(c.service.depends_on[redisHost]).toEqual({ condition: "service_healthy" });
    const queueFile = c.container.mounts.find((m) => m.path === c.env.SWITCHYARD_CONFIG_FILE);
    expect(queueFile?.hostPath && existsSync(queueFile.hostPath)).toBe(true);
    expectValidQueueFile(readFileSync(queueFile!.hostPath!, "utf8"));
  });
});

describe("Dockerfile", () => {
  const docker = read("Dockerfile");

  it("serves gRPC and the side port on all interfaces, as a non-root user", () => {
    expect(docker).toContain("SWITCHYARD_GRPC_ADDRESS=0.0.0.0:50051");
    expect(docker).toContain("SWITCHYARD_HTTP_ADDRESS=0.0.0.0:9090");
    expect(docker).toContain("EXPOSE 50051 9090");
    expect(docker).toMatch(/^USER node$/m);
  });

  it("builds and runs on one Node LTS line that is still supported", () => {
    // End of life of each LTS line (nodejs.org/en/about/previous-releases).
    const endOfLife: Record<string, string> = { "20": "2026-04-30", "22": "2027-04-30", "24": "2028-04-30" };
    const majors = [...docker.matchAll(/^FROM node:(\d+)-/gm)].map((m) => m[1]);
    expect(majors.length).toBe([...docker.matchAll(/^FROM /gm)].length);
    expect(new Set(majors).size).toBe(1);
    expect(endOfLife[majors[0]], `node ${majors[0]} is not an LTS line this test knows`).toBeDefined();
    expect(Date.parse(endOfLife[majors[0]])).toBeGreaterThan(Date.now());
  });
});
