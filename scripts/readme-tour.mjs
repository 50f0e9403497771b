#!/usr/bin/env node
/**
 * Runs the README's tour ("## A tour with `buf curl`") against a real server
 * and produces its code blocks: every command as the README shows it, run by
 * bash with `sy` defined as the README's alias (only the address is the
 * server's own), followed by what it printed. The Lease streams (typed into,
 * or fed by `(echo …; sleep N) |`) are driven through buf curl's stdin, which
 * closes once the delivery they wait for has arrived.
 *
 *   node scripts/readme-tour.mjs           prints the blocks
 *   node scripts/readme-tour.mjs --write   puts them into README.md
 *
 * test/docs/readme-tour.test.ts fails when README's blocks differ from a run's
 * (item ids, the owner part of lease tokens, times and claim ages normalized). Needs a build
 * (dist/main.js), redis-server (the embedded Redis) and redis-cli.
 */
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const BUF = join(ROOT, "node_modules", ".bin", "buf");
/** The address the README shows; the server listens on a free port instead. */
const SHOWN = "127.0.0.1:50051";
const TOUR_START = "## A tour with `buf curl`";
const TOUR_END = "## Command line";
const BASE = `http://${SHOWN}/switchyard.v1.QueueService`;

/** The environment of the server and the commands: none of the caller's Switchyard settings. */
function cleanEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("SWITCHYARD_")));
}

/** Starts `node dist/main.js` in `dir` (its embedded Redis in `dir/.switchyard-data`); resolves once it listens. */
function startServer(dir) {
  const child = spawn(process.execPath, [join(ROOT, "dist", "main.js")], {
    cwd: dir,
    env: { ...cleanEnv(), SWITCHYARD_GRPC_ADDRESS: "127.0.0.1:0", SWITCHYARD_HTTP_ADDRESS: "127.0.0.1:0", SWITCHYARD_LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise((ok) => child.once("exit", ok));
  const address = new Promise((ok, fail) => {
    child.once("exit", (code) => fail(new Error(`the server exited with ${code} before it listened`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      const m = /switchyard listening on (\S+)/.exec(line);
      if (m) ok(m[1]);
    });
  });
  return { child, exited, address };
}

/** Runs a command as the README shows it, in bash with the README's `sy`; resolves to what it printed (stdout, then stderr). */
function sh(ctx, command) {
  const script = `sy() { "${BUF}" curl --protocol grpc --http2-prior-knowledge "$@"; }\n${command.replaceAll(SHOWN, ctx.address)}`;
  return new Promise((ok) => {
    execFile("bash", ["-c", script], { cwd: ctx.dir, env: cleanEnv(), timeout: 30_000 }, (_err, stdout, stderr) => ok(`${stdout}${stderr}`.trimEnd()));
  });
}

/**
 * A Lease stream through `sy -d @-`, as a reader types into it: `send` writes
 * a line to its stdin, `until` waits for its output to hold text, `end` is
 * Ctrl-D and resolves to everything it printed.
 */
function stream(ctx) {
  const child = spawn(BUF, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "-d", "@-", `http://${ctx.address}/switchyard.v1.QueueService/Lease`], {
    cwd: ctx.dir,
    env: cleanEnv(),
  });
  let out = "";
  const waiters = [];
  const onData = (chunk) => {
    out += chunk;
    for (const w of [...waiters]) if (w.test()) waiters.splice(waiters.indexOf(w), 1), w.ok();
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  const exited = new Promise((ok) => child.once("exit", ok));
  return {
    send: (line) => child.stdin.write(`${line}\n`),
    /** Waits until the output holds a complete top-level JSON object that contains `text`. */
    until(text, timeoutMs = 10_000) {
      const test = () => out.split(/\n}\n?/).some((part) => part.includes(text) && out.indexOf(part) + part.length < out.length);
      if (test()) return Promise.resolve();
      return new Promise((ok, fail) => {
        const timer = setTimeout(() => fail(new Error(`no "${text}" from the Lease stream in ${timeoutMs} ms; it printed:\n${out}`)), timeoutMs);
        waiters.push({ test, ok: () => (clearTimeout(timer), ok()) });
      });
    },
    get output() {
      return out.trimEnd();
    },
    async end() {
      child.stdin.end();
      await exited;
      return out.trimEnd();
    },
  };
}

const token = (output, n = 0) => [...output.matchAll(/"leaseToken": "([^"]+)"/g)][n][1];

/**
 * `(echo '<open>'; sleep N) | sy -d @- …/Lease`, shown as written: the stream
 * gets the open message and its stdin closes once the delivery has arrived,
 * which the sleep gives a reader time for (a loaded machine may need longer).
 */
function pipedLease(shown) {
  const open = /echo '([^']+)'/.exec(shown)[1];
  return async (ctx) => {
    const lease = stream(ctx);
    lease.send(open);
    await lease.until('"deliveries"');
    return [`$ ${shown}`, await lease.end()];
  };
}

/**
 * The tour, block by block. A block is a list of steps: `$` (a command shown
 * with its output), `hidden` (a command the prose mentions but the block does
 * not show), or `run` (custom: resolves to the lines to show).
 */
const TOUR = [
  [{ $: `sy ${`http://${SHOWN}/grpc.health.v1.Health/Check`}` }],
  [{ $: `sy -d '{"queue":{"name":"{thumbnails}","mode":"QUEUE_MODE_RELIABLE","recoverySet":"{thumbnails}.claims","minIdle":"60s"}}' \\\n    ${BASE}/CreateQueue` }],
  [{ $: `sy -d '{"queue":{"name":"thumbnails","mode":"QUEUE_MODE_RELIABLE"}}' \\\n    ${BASE}/CreateQueue` }],
  [
    { $: `echo -n '{"image":"cat.jpg"}' | base64` },
    {
      $:
        `sy -d '{"queue":"{thumbnails}","items":[{"payload":"eyJpbWFnZSI6ImNhdC5qcGcifQ==","headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}]}' \\\n` +
        `    ${BASE}/Enqueue`,
    },
    { $: `sy -d '{"name":"{thumbnails}"}' ${BASE}/GetQueueStats` },
  ],
  [
    {
      $:
        `printf '%s\\n' '{"id":1,"request":{"queue":"{thumbnails}","items":[{"payload":"Y2F0LmpwZw=="},{"payload":"ZG9nLmpwZw=="}]}}' \\\n` +
        `                '{"id":2,"request":{"queue":"thumbnails","items":[{"payload":"Y293LmpwZw=="}]}}' |\n` +
        `  sy -d @- ${BASE}/EnqueueStream`,
    },
    // The stream's two items are not part of the rest of the tour.
    { hidden: `sy -d '{"name":"{thumbnails}"}' ${BASE}/PurgeQueue && sy -d '{"queue":"{thumbnails}","items":[{"payload":"eyJpbWFnZSI6ImNhdC5qcGcifQ==","headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}]}' ${BASE}/Enqueue` },
  ],
  [
    {
      // Typed: the open message, then (once the delivery arrived) its ack, then Ctrl-D.
      async run(ctx) {
        const open = '{"open":{"queue":"{thumbnails}","credit":1}}';
        const lease = stream(ctx);
        lease.send(open);
        await lease.until('"deliveries"');
        const delivered = lease.output;
        const ack = `{"ack":{"leaseToken":"${token(delivered)}"}}`;
        lease.send(ack);
        const all = await lease.end();
        const after = all.slice(delivered.length).trim();
        return [
          `$ sy -d @- ${BASE}/Lease`,
          `${open.padEnd(67)}<- you type this`,
          delivered,
          `${ack}   <- you type this`,
          ...(after ? [after] : []),
          `${"".padEnd(67)}<- then Ctrl-D`,
        ];
      },
    },
    { $: `sy -d '{"name":"{thumbnails}"}' ${BASE}/GetQueueStats` },
  ],
  [
    { hidden: `sy -d '{"queue":"{thumbnails}","items":[{"payload":"eyJpbWFnZSI6ImRvZy5qcGcifQ=="}]}' ${BASE}/Enqueue` },
    { run: pipedLease(`(echo '{"open":{"queue":"{thumbnails}","credit":1}}'; sleep 2) | \\\n    sy -d @- ${BASE}/Lease`) },
    { $: `sy -d '{"name":"{thumbnails}"}' ${BASE}/GetQueueStats` },
  ],
  [
    {
      // Another terminal holds a stream open; this one acks its delivery twice.
      async run(ctx) {
        const held = stream(ctx);
        held.send('{"open":{"queue":"{thumbnails}","credit":1}}');
        await held.until('"deliveries"');
        const leaseToken = token(held.output);
        const lines = [];
        for (const command of [
          `sy -d '{"name":"{thumbnails}"}' ${BASE}/GetQueueStats`,
          `sy -d '{"leaseToken":"${leaseToken}"}' \\\n    ${BASE}/Ack`,
          `sy -d '{"leaseToken":"${leaseToken}"}' \\\n    ${BASE}/Ack`,
        ]) {
          lines.push(`$ ${command}`, await sh(ctx, command));
        }
        await held.end();
        return lines;
      },
    },
  ],
  [
    { $: `sy -d '{"queue":{"name":"cache.warmups","mode":"QUEUE_MODE_SIMPLE"}}' \\\n    ${BASE}/CreateQueue` },
    { $: `redis-cli --no-raw -s .switchyard-data/redis.sock LPUSH cache.warmups '{"page":"/pricing"}'` },
    { run: pipedLease(`(echo '{"open":{"queue":"cache.warmups","credit":10}}'; sleep 1) | \\\n    sy -d @- ${BASE}/Lease`) },
  ],
];

/** Runs the tour against a fresh server; resolves to its code blocks' text, in order. */
export async function runTour() {
  const dir = mkdtempSync(join(tmpdir(), "sy-tour-"));
  const server = startServer(dir);
  try {
    const ctx = { dir, address: await server.address };
    const blocks = [];
    for (const block of TOUR) {
      const lines = [];
      for (const step of block) {
        if (step.hidden) await sh(ctx, step.hidden);
        else if (step.run) lines.push(...(await step.run(ctx)));
        else lines.push(`$ ${step.$}`, ...[await sh(ctx, step.$)].filter(Boolean));
      }
      blocks.push(lines.join("\n"));
    }
    return blocks;
  } finally {
    server.child.kill("SIGTERM");
    await server.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The tour's code blocks in `readme` (fences without a language; the ```sh ones are instructions), with where each sits. */
export function readmeBlocks(readme) {
  const start = readme.indexOf(TOUR_START);
  const end = readme.indexOf(TOUR_END, start);
  if (start < 0 || end < 0) throw new Error(`README has no "${TOUR_START}" section before "${TOUR_END}"`);
  const blocks = [];
  let open; // the fence line of the block being read, and where its text starts
  let at = start;
  for (const line of readme.slice(start, end).split("\n")) {
    if (line.startsWith("```")) {
      if (!open) open = { fence: line, from: at + line.length + 1 };
      else {
        if (open.fence === "```") blocks.push({ text: readme.slice(open.from, at - 1), at: open.from });
        open = undefined;
      }
    }
    at += line.length + 1;
  }
  return blocks;
}

/**
 * A block as the comparison sees it: item ids, the owner part of lease tokens,
 * timestamps and claim ages replaced by placeholders, and the responses of an
 * EnqueueStream (answered in any order) sorted.
 */
export function normalize(block) {
  const text = block
    .replace(/"([rs])\.(\d+)\.[^."]+\.([^."]+)"/g, '"$1.$2.<owner>.$3"')
    .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, "<time>")
    .replace(/"(id|oldestClaimAge)": "[^"]*"/g, '"$1": "<$1>"')
    .replace(/("ids": \[)([^\]]*)\]/g, (_m, head, ids) => `${head}${ids.replace(/"[^"]*"/g, '"<id>"')}]`);
  return text.replace(/(EnqueueStream\n)((?:\{[\s\S]*?\n\}\n?)+)/g, (_m, head, answers) => head + answers.trim().split(/\n(?=\{)/).sort().join("\n"));
}

async function main() {
  const blocks = await runTour();
  if (!process.argv.includes("--write")) {
    console.log(blocks.map((b) => `\`\`\`\n${b}\n\`\`\``).join("\n\n"));
    return;
  }
  const path = join(ROOT, "README.md");
  let readme = readFileSync(path, "utf8");
  const found = readmeBlocks(readme);
  if (found.length !== blocks.length) throw new Error(`README's tour has ${found.length} output blocks, the script ${blocks.length}`);
  for (let i = found.length - 1; i >= 0; i--) readme = readme.slice(0, found[i].at) + blocks[i] + readme.slice(found[i].at + found[i].text.length);
  writeFileSync(path, readme);
  console.log(`README.md: ${blocks.length} tour blocks written`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
