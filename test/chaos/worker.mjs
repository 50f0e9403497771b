#!/usr/bin/env node
// A chaos-suite worker: a real process that leases from Switchyard with the
// compiled TypeScript client (dist/client) and reports every event as one JSON
// line on stdout, so the test's ledger sees what this worker saw and did.
//
//   node test/chaos/worker.mjs --name w1 --addresses host:port[,host:port...] --queue Q
//        [--credit 10] [--mode ack|hold] [--delay ms] [--poison retry|crash]
//        [--crash-delay ms] [--give-up ms]
//
// --mode ack    runs each delivery for --delay ms, then acks it on its stream;
//               when the stream has ended meanwhile, acks with the unary Ack on
//               the next address instead (and reports whether that was refused).
// --mode hold   takes --credit items, prints {"e":"holding"} and settles nothing.
// --poison      what to do with an item whose payload is "poison": retry it, or
//               crash (exit 3) after --crash-delay ms, as a worker that chokes on it.
// A lost stream is reopened on the next address with a short backoff. On a
// `drain` message the worker finishes what it holds; the server then ends the
// stream and the worker moves on to the next address. --give-up bounds the
// process's whole life (default 120 s), so a forgotten worker never lingers.
//
// Events (field "e"): open, opened, d (delivery; with ak: 1, acked at once on its
// stream, as if followed by an "a" line), a (ack sent on the stream),
// ua (unary ack: ok, code), r (retry sent), sr (a settle the server refused),
// drain, end (code, msg), holding, crash, give-up.
import { SwitchyardClient } from "../../dist/client/index.js";

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) throw new Error(`unexpected argument ${a}`);
    out[a.slice(2)] = argv[i + 1];
    i++;
  }
  return out;
}

const args = parseArgs(process.argv.slice(2));
const name = args.name ?? `w${process.pid}`;
const addresses = (args.addresses ?? "").split(",").filter(Boolean);
const queue = args.queue;
const credit = Number(args.credit ?? 10);
const mode = args.mode ?? "ack";
const delay = Number(args.delay ?? 0);
const poison = args.poison ?? "";
const crashDelay = Number(args["crash-delay"] ?? 0);
const giveUp = Number(args["give-up"] ?? 120_000);
if (!queue || addresses.length === 0) {
  process.stderr.write("worker.mjs: --queue and --addresses are required\n");
  process.exit(2);
}

// Events are written in batches, one write per turn of the event loop (a
// 100,000-item run prints 200,000 lines). stdout is a pipe: writes stay in
// order, and flushAndExit writes what is buffered before exiting.
let buffered = [];
const flush = () => {
  if (buffered.length === 0) return;
  const text = buffered.join("");
  buffered = [];
  process.stdout.write(text);
};
const emit = (event) => {
  if (buffered.length === 0) setImmediate(flush);
  buffered.push(JSON.stringify({ ...event, w: name, t: Date.now() }) + "\n");
};
const flushAndExit = (code) => {
  flush();
  process.stdout.write("", () => process.exit(code));
};

const clients = new Map();
const clientFor = (address) => {
  let c = clients.get(address);
  if (!c) {
    c = new SwitchyardClient(address, { timeoutMs: 5000 });
    clients.set(address, c);
  }
  return c;
};

setTimeout(() => {
  emit({ e: "give-up" });
  flushAndExit(4);
}, giveUp).unref();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let stopping = false;
process.on("SIGTERM", () => {
  stopping = true;
  flushAndExit(0);
});

let streamNo = 0;
let at = 0; // index of the address in use

async function settleByUnary(d, s) {
  // The stream is gone: ack with a unary call, on the next address first (the
  // one in use may be the instance that just died), then the others.
  let last;
  for (let k = 1; k <= addresses.length; k++) {
    const address = addresses[(at + k) % addresses.length];
    try {
      await clientFor(address).ack(d.leaseToken);
      emit({ e: "ua", id: d.id, tok: d.leaseToken, s, ok: true, addr: address });
      return;
    } catch (err) {
      last = err;
      if (err.code !== 14 && err.code !== 4) break; // refused (not UNAVAILABLE / DEADLINE_EXCEEDED): final
    }
  }
  emit({ e: "ua", id: d.id, tok: d.leaseToken, s, ok: false, code: last.code, msg: String(last.details ?? last.message) });
}

async function handle(session, state, d, s) {
  const text = Buffer.from(d.payload).toString();
  if (text === "poison" && poison === "crash") {
    await sleep(crashDelay);
    emit({ e: "crash", id: d.id });
    flushAndExit(3);
    return;
  }
  if (delay > 0) await sleep(delay);
  if (text === "poison" && poison === "retry") {
    if (!state.ended) {
      emit({ e: "r", id: d.id, tok: d.leaseToken, s });
      session.retry(d.leaseToken);
    }
    return;
  }
  if (!state.ended) {
    emit({ e: "a", id: d.id, tok: d.leaseToken, s });
    session.ack(d.leaseToken);
  } else {
    await settleByUnary(d, s);
  }
}

async function runStream(address) {
  const s = ++streamNo;
  emit({ e: "open", s, addr: address });
  const session = clientFor(address).lease(queue, credit);
  const state = { ended: false };
  // Failed settles come back as settle results (successful acks are not echoed).
  session.onSettleResult((r) => {
    if (r.code !== 0) emit({ e: "sr", s, tok: r.leaseToken, code: r.code, msg: r.message });
  });
  // LeaseSession keeps its grpc stream private; listen for drain notices on it.
  session.stream.on("data", (msg) => {
    if (msg.kind.case === "drain") emit({ e: "drain", s, graceMs: msg.kind.value.grace ? Number(msg.kind.value.grace.seconds) * 1000 + msg.kind.value.grace.nanos / 1e6 : null });
  });
  const ended = session.ended.then((err) => {
    state.ended = true;
    emit({ e: "end", s, code: err ? err.code : 0, msg: err ? String(err.details ?? err.message) : "" });
    return err;
  });
  try {
    await session.opened;
  } catch (err) {
    await ended;
    return false;
  }
  emit({ e: "opened", s, addr: address });
  const running = new Set();
  let held = 0;
  for await (const d of session) {
    const text = Buffer.from(d.payload).toString();
    const base = { e: "d", id: d.id, tok: d.leaseToken, f: Number(d.fence), n: d.deliveryCount, q: d.queue, s, p: text.slice(0, 16) };
    if (mode === "ack" && delay === 0 && text !== "poison" && !state.ended) {
      // The fast path (a backlog): ack at once, and report delivery and ack in one line ("ak").
      emit({ ...base, ak: 1 });
      session.ack(d.leaseToken);
      continue;
    }
    emit(base);
    if (mode === "hold") {
      if (++held === credit) emit({ e: "holding", s, n: held });
      continue;
    }
    const p = handle(session, state, d, s).finally(() => running.delete(p));
    running.add(p);
  }
  const err = await ended;
  await Promise.all(running);
  return !err; // a clean end (after a drain) also moves on
}

async function main() {
  for (let attempt = 0; !stopping; ) {
    const address = addresses[at % addresses.length];
    const ok = await runStream(address);
    if (stopping) break;
    // Lost or ended: try the next address, with a short backoff.
    at++;
    attempt = ok ? 0 : attempt + 1;
    await sleep(Math.min(50 * 2 ** attempt, 1000));
  }
}

main().catch((err) => {
  process.stderr.write(`worker.mjs ${name}: ${err?.stack ?? err}\n`);
  flushAndExit(1);
});
