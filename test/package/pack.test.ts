/**
 * The npm package as users get it: `npm pack` ships what they need and nothing
 * else, and the tarball installs into an empty project (offline: its
 * dependencies come from this checkout's node_modules, as tarballs at the
 * versions package-lock.json pins), where `npx switchyard --help` runs and
 * `switchyard/client` imports without loading the server, and talks to a server.
 */
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useSwitchyard } from "../helpers/switchyard.js";

const execFileP = promisify(execFile);
const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const npm = (args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) =>
  execFileP("npm", args, { cwd, env, timeout: 120_000, maxBuffer: 16 << 20 });

interface LockEntry {
  version: string;
  dev?: boolean;
  devOptional?: boolean;
  dependencies?: Record<string, string>;
  [field: string]: unknown;
}

const t = useSwitchyard();
let dir: string;
let tarball: string;
let files: string[];
let app: string;

/**
 * An empty project with the tarball installed by `npm ci --offline` from a lockfile that
 * names local tarballs: npm then needs no registry, and nests what the real install nests
 * (ioredis nests a cluster-key-slot of its own).
 */
async function installInEmptyProject(): Promise<string> {
  const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as { packages: Record<string, LockEntry> };
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as Record<string, unknown>;
  const project = join(dir, "app");
  mkdirSync(join(dir, "deps"));
  mkdirSync(project);
  const packages: Record<string, LockEntry> = {
    "": { version: "1.0.0", name: "app", dependencies: { switchyard: `file:${tarball}` } },
    "node_modules/switchyard": {
      version: pkg.version as string,
      resolved: `file:${tarball}`,
      dependencies: pkg.dependencies as Record<string, string>,
      bin: pkg.bin,
      engines: pkg.engines,
    },
  };
  const deps = Object.entries(lock.packages).filter(([path, entry]) => path && !entry.dev && !entry.devOptional);
  await Promise.all(
    deps.map(async ([path, entry], n) => {
      const file = join(dir, "deps", `${n}.tgz`);
      // A package's folder as npm's tarballs hold it: under package/, without its nested node_modules.
      await execFileP("tar", ["-czf", file, "-C", join(root, path), "--exclude=./node_modules", "--transform", "s,^\\.,package,", "."]);
      const { integrity: _integrity, resolved: _resolved, ...rest } = entry;
      packages[path] = { ...rest, resolved: `file:${file}` };
    }),
  );
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "module", dependencies: { switchyard: `file:${tarball}` } }));
  writeFileSync(join(project, "package-lock.json"), JSON.stringify({ name: "app", version: "1.0.0", lockfileVersion: 3, requires: true, packages }));
  await npm(["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], project, { ...process.env, npm_config_cache: join(dir, "npm-cache") });
  return project;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-pack-"));
  // dist/ is built: npm test builds first. (npm pack without --ignore-scripts cleans and builds: prepack.)
  const packed = JSON.parse((await npm(["pack", "--ignore-scripts", "--json", "--pack-destination", dir], root)).stdout) as { filename: string; files: { path: string }[] }[];
  tarball = join(dir, packed[0].filename);
  files = packed[0].files.map((f) => f.path);
  app = await installInEmptyProject();
}, 180_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("npm pack", () => {
  it("builds afresh before it packs (no file of an earlier build left in dist/)", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts.prepack).toBe(`node -e "require('node:fs').rmSync('dist', { recursive: true, force: true })" && npm run build`);
  });

  it("ships the compiled service, client, CLI, scripts, dashboard, protos and licence, and no sources, tests or maps", () => {
    expect(files).toEqual(
      expect.arrayContaining([
        "LICENSE",
        "README.md",
        "package.json",
        "docs/worker-protocol.md",
        "proto/switchyard/v1/queue.proto",
        "dist/index.js",
        "dist/index.d.ts",
        "dist/client/index.js",
        "dist/client/index.d.ts",
        "dist/cli/main.js",
        "dist/main.js",
        "dist/redis/scripts/lease.lua",
        "dist/dashboard/index.html",
      ]),
    );
    expect(files.filter((f) => /^(src|test|bench|dashboard|scripts|examples|clients|deploy|node_modules)\/|\.map$|\.ts$(?<!\.d\.ts$)/.test(f))).toEqual([]);
    expect(readFileSync(join(root, "LICENSE"), "utf8")).toContain("Apache License\n                           Version 2.0");
  });
});

describe("the installed package", () => {
  it("runs npx switchyard --help", async () => {
    const { stdout } = await execFileP("npx", ["--offline", "switchyard", "--help"], { cwd: app, timeout: 60_000 });
    expect(stdout).toMatch(/^usage: switchyard <command> \[options\]/);
    expect(stdout).toContain("queue enqueue NAME PAYLOAD...");
  });

  it("imports switchyard/client without loading the server, and the client works", async () => {
    // A resolve hook lists every module the import loads.
    writeFileSync(
      join(app, "hook.mjs"),
      `import { register } from "node:module";
register("data:text/javascript," + encodeURIComponent(\`
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  process.stderr.write("LOADED " + r.url + "\\\\n");
  return r;
}\`));`,
    );
    writeFileSync(
      join(app, "use.mjs"),
      `import { SwitchyardClient, QueueMode } from "switchyard/client";
const client = new SwitchyardClient(process.argv[2]);
await client.createQueue({ name: "{packed}", mode: QueueMode.RELIABLE });
const ids = await client.enqueue("{packed}", ["from the packed client"]);
const stats = await client.getQueueStats("{packed}");
console.log(JSON.stringify({ ids: ids.length, ready: Number(stats.ready) }));
client.close();`,
    );
    const { stdout, stderr } = await execFileP(process.execPath, ["--import", "./hook.mjs", "use.mjs", t.sy.address], { cwd: app, timeout: 60_000 });
    expect(JSON.parse(stdout)).toEqual({ ids: 1, ready: 1 });
    const loaded = stderr.split("\n").filter((l) => l.startsWith("LOADED file:")).map((l) => l.slice("LOADED file://".length));
    expect(loaded.some((f) => f.endsWith("/node_modules/switchyard/dist/client/index.js"))).toBe(true);
    const server = loaded.filter((f) => /\/node_modules\/(ioredis|pino|prom-client|croner)\/|\/switchyard\/dist\/(app|main|queue\/queues|redis\/)/.test(f));
    expect(server).toEqual([]);
  });

  it("type-checks an import of switchyard/client through the exports map", async () => {
    writeFileSync(join(app, "check.ts"), `import { SwitchyardClient, type Delivery } from "switchyard/client";\nexport const f = (c: SwitchyardClient, d: Delivery): Promise<unknown> => c.ack(d.leaseToken);\n`);
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true, noEmit: true, skipLibCheck: true, types: [] }, files: ["check.ts"] }),
    );
    await execFileP(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", app], { cwd: app, timeout: 120_000 });
  }, 120_000);
});
