/**
 * The Switchyard container as deploy/kubernetes.yaml and docker-compose.yml
 * describe it: its environment (the image's ENV, then the manifest's), its
 * mounts (what is writable, and where each comes from), and the lifecycle
 * settings the deployment tests compare.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are untyped YAML */
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseDuration } from "../../src/config.js";
import { readYaml } from "../helpers/yaml.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** A mount of the container. */
export interface Mount {
  /** Where the container sees it. */
  path: string;
  kind: "emptyDir" | "tmpfs" | "configMap" | "secret" | "bind";
  writable: boolean;
  /** Files it holds, relative to `path` (configMap and secret items). */
  files: string[];
  /** The file or folder on the host (Compose binds and secrets). */
  hostPath?: string;
}

export interface Container {
  raw: any;
  /** Variables as the process sees them; a value from elsewhere reads `from:<source>`. */
  env: Record<string, string>;
  mounts: Mount[];
  readOnlyRootFilesystem: boolean;
}

/** The ENV of the Dockerfile's last stage. */
export function imageEnv(): Record<string, string> {
  const docker = readFileSync(join(root, "Dockerfile"), "utf8").replace(/\\\n/g, " ");
  const last = docker.slice(docker.lastIndexOf("\nFROM "));
  const env: Record<string, string> = {};
  for (const [, line] of last.matchAll(/^ENV (.*)$/gm)) for (const [, k, v] of line.matchAll(/(\w+)=(\S+)/g)) env[k] = v;
  return env;
}

const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;

export function kubernetes() {
  const docs = readYaml(join(root, "deploy/kubernetes.yaml")) as any[];
  const of = (kind: string) => docs.find((d) => d.kind === kind);
  const configMap = of("ConfigMap").data as Record<string, unknown>;
  const deployment = of("Deployment");
  const pod = deployment.spec.template;
  const raw = pod.spec.containers[0];
  const env: Record<string, string> = { ...imageEnv() };
  for (const ref of raw.envFrom ?? []) if (ref.configMapRef) for (const [k, v] of Object.entries(configMap)) if (envName.test(k)) env[k] = String(v);
  for (const e of raw.env ?? []) {
    const from = e.valueFrom?.secretKeyRef ? `secret:${e.valueFrom.secretKeyRef.name}/${e.valueFrom.secretKeyRef.key}` : `field:${e.valueFrom?.fieldRef?.fieldPath}`;
    env[e.name] = e.value ?? `from:${from}`;
  }
  const volumes = new Map<string, any>((pod.spec.volumes ?? []).map((v: any) => [v.name, v]));
  const mounts: Mount[] = (raw.volumeMounts ?? []).map((m: any) => {
    const v = volumes.get(m.name);
    const kind = v.emptyDir ? "emptyDir" : v.configMap ? "configMap" : "secret";
    const items = (v.configMap ?? v.secret)?.items ?? [];
    return { path: m.mountPath, kind, writable: kind === "emptyDir" && !m.readOnly, files: items.map((i: any) => i.path) };
  });
  const proxyConfig = JSON.parse(pod.metadata.annotations["proxy.istio.io/config"] ?? "{}") as { terminationDrainDuration?: string };
  return {
    configMap: configMap as Record<string, string>,
    container: { raw, env, mounts, readOnlyRootFilesystem: raw.securityContext?.readOnlyRootFilesystem === true } as Container,
    env,
    terminationGraceMs: pod.spec.terminationGracePeriodSeconds * 1000,
    preStopMs: Number(raw.lifecycle.preStop.exec.command[1]) * 1000,
    meshDrainMs: parseDuration("terminationDrainDuration", proxyConfig.terminationDrainDuration ?? "5s"),
    podAnnotations: pod.metadata.annotations as Record<string, string>,
    service: of("Service"),
  };
}

export function compose() {
  const [file] = readYaml(join(root, "docker-compose.yml")) as any[];
  const service = file.services.switchyard;
  const env: Record<string, string> = { ...imageEnv(), ...(service.environment as Record<string, string>) };
  const mounts: Mount[] = [
    ...(service.tmpfs ?? []).map((path: string) => ({ path, kind: "tmpfs" as const, writable: true, files: [] })),
    ...(service.volumes ?? []).map((spec: string) => {
      const [host, path, mode] = spec.split(":");
      return { path, kind: "bind" as const, writable: mode !== "ro", files: [], hostPath: resolve(root, host) };
    }),
    ...(service.secrets ?? []).map((name: string) => ({
      path: `/run/secrets/${name}`,
      kind: "secret" as const,
      writable: false,
      files: [],
      hostPath: resolve(root, file.secrets[name].file),
    })),
  ];
  return {
    file,
    service,
    env,
    container: { raw: service, env, mounts, readOnlyRootFilesystem: service.read_only === true } as Container,
  };
}
