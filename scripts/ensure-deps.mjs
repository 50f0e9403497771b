// `prestart` and `pretest`: installs dependencies when node_modules is missing
// or older than package-lock.json, so `npm start` and `npm test` work as the
// first command on a fresh clone. Node built-ins only: nothing is installed yet.
import { spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";

const mtime = (path) => (existsSync(path) ? statSync(path).mtimeMs : -1);

/** Runs `npm <args>`; on failure prints only npm's error summary, not its usage text. */
function npm(...args) {
  process.stderr.write(`switchyard: node_modules is missing or older than package-lock.json; running npm ${args.join(" ")}\n`);
  const r = spawnSync("npm", args, { stdio: ["inherit", "inherit", "pipe"], encoding: "utf8" });
  const ok = r.status === 0;
  const err = r.stderr ?? "";
  process.stderr.write(ok ? err : err.split("\n").filter((l) => /^npm error (code|Missing|`)/.test(l)).join("\n") + "\n");
  return ok;
}

// npm rewrites node_modules/.package-lock.json on every install: it dates node_modules.
const installed = mtime("node_modules/.package-lock.json");
const locked = mtime("package-lock.json");

if (installed < 0 || installed < locked) {
  const ok = locked < 0 ? npm("install") : npm("ci");
  if (!ok) process.exit(1);
}
