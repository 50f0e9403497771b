// Preload for server-timeline.mjs (the server child's --import): stamps, on CLOCK_MONOTONIC (µs), when the
// server's JavaScript reaches each mark of a paced item's way, and writes them to
// $SERVER_TIMELINE_DIR/stamps-<pid>.json on SIGUSR2. The marks wrap grpc-js's server call (a private class of
// its build) and private methods of the queue core, as bench/stage-hooks.ts does: a rename there leaves a
// mark with no stamps, which server-timeline.mjs shows as "-".
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { Queues } from "../../dist/queue/queues.js";
import { QueueDispatcher } from "../../dist/queue/dispatcher.js";

const call = createRequire(import.meta.url)("@grpc/grpc-js/build/src/server-interceptors.js").BaseServerInterceptingCall.prototype;
const stamps = [];
const now = () => Number(process.hrtime.bigint() / 1000n);
const mark = (proto, method, name) => {
  const original = proto[method];
  proto[method] = function (...args) {
    stamps.push(name, now());
    return original.apply(this, args);
  };
};
mark(call, "handleDataFrame", "grpc: data frame");
{
  // The method's deserializer, wrapped once per handler as its first message is read.
  const original = call.decompressAndMaybePush;
  call.decompressAndMaybePush = function (...args) {
    const handler = this.handler;
    if (!handler.timelineWrapped) {
      const deserialize = handler.deserialize;
      handler.deserialize = (bytes) => {
        stamps.push("deserialize", now());
        const message = deserialize(bytes);
        stamps.push("deserialized", now());
        return message;
      };
      handler.timelineWrapped = true;
    }
    return original.apply(this, args);
  };
}
mark(Queues.prototype, "enqueueIds", "Queues.enqueueIds");
mark(Queues.prototype, "write", "Queues.write (prepared)");
mark(QueueDispatcher.prototype, "push", "QueueDispatcher.push");
mark(QueueDispatcher.prototype, "takePushed", "push-lease sent");
mark(QueueDispatcher.prototype, "distribute", "distribute");
mark(call, "sendMessage", "grpc: sendMessage");
process.on("SIGUSR2", () => writeFileSync(join(process.env.SERVER_TIMELINE_DIR ?? "/tmp", `stamps-${process.pid}.json`), JSON.stringify(stamps)));
