// Preload for client-timeline.mjs (every agent process's --import): stamps, on CLOCK_MONOTONIC (µs), when a
// producer's or a worker's JavaScript reaches each mark of a paced item's way, and writes them to
// $CLIENT_TIMELINE_DIR/stamps-<pid>.json on SIGUSR2. Both systems' agents stringify an item (its send time
// taken just before) and parse it as their handler starts, so those two calls mark "item" and "handler";
// grpc-js's client marks a message read off its stream (a private method of its build). In Switchyard's
// agents (and only there: a process loads only its own system's client) the client's methods mark its
// stops: a rename leaves a mark with no stamps, which client-timeline.mjs shows as "-".
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const stamps = [];
const now = () => Number(process.hrtime.bigint() / 1000n);
const mark = (proto, method, name) => {
  const original = proto?.[method];
  if (typeof original !== "function") return;
  proto[method] = function (...args) {
    stamps.push(name, now());
    return original.apply(this, args);
  };
};
const isItem = (v) => v !== null && typeof v === "object" && typeof v.seq === "number" && typeof v.t === "number";
const { stringify, parse } = JSON;
JSON.stringify = function (value, ...rest) {
  if (isItem(value)) stamps.push("item", now());
  return stringify.call(this, value, ...rest);
};
JSON.parse = function (text, ...rest) {
  const at = now();
  const value = parse.call(this, text, ...rest);
  if (isItem(value)) stamps.push("handler", at);
  return value;
};
mark(createRequire(import.meta.url)("@grpc/grpc-js/build/src/subchannel-call.js").Http2SubchannelCall?.prototype, "tryPush", "grpc: message read");
if (process.argv[2] === "switchyard") {
  const { SwitchyardClient, LeaseSession } = await import("../../dist/client/client.js");
  const { EnqueueStream } = await import("../../dist/client/enqueue-stream.js");
  mark(SwitchyardClient.prototype, "enqueue", "SwitchyardClient.enqueue");
  mark(EnqueueStream.prototype, "write", "EnqueueStream.write");
  mark(LeaseSession.prototype, "push", "LeaseSession.push (decoded)");
}
process.on("SIGUSR2", () => writeFileSync(join(process.env.CLIENT_TIMELINE_DIR ?? "/tmp", `stamps-${process.pid}.json`), stringify(stamps)));
