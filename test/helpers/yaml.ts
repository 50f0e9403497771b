/**
 * YAML documents read with Debian's python3-yaml (the project has no YAML
 * parser of its own): the deployment tests check the manifests as data.
 */
import { execFileSync } from "node:child_process";

/** Every document of a YAML file, as JSON values (YAML 1.1, as Kubernetes and Compose read it). */
export function readYaml(path: string): unknown[] {
  const json = execFileSync(
    "/usr/bin/python3",
    ["-c", "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout, default=str)", path],
    { encoding: "utf8" },
  );
  return JSON.parse(json) as unknown[];
}
