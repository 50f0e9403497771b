/**
 * EnqueueStream: Enqueue calls as messages on one long-lived stream (see
 * queue.proto). A unary call costs its HTTP/2 headers, trailers and call set-up
 * on both sides, several times what a message on an open stream costs (issue
 * #4, bench rows 2 and 5); producers that enqueue often keep one stream open.
 *
 * Each request runs exactly as a unary Enqueue would and is answered with its
 * id and its ids or its status; a failed or refused request does not end the
 * stream. At most MAX_IN_FLIGHT requests of a stream run at once: beyond that
 * the stream stops reading and HTTP/2 flow control holds the client back.
 *
 * Invariant: the stream ends with OK only once no more messages will be read
 * (the client half-closed, or the instance drains for shutdown) and every
 * message read has been answered; so a request unanswered at an OK end was
 * never read, and the client may send it again.
 */
import type * as grpc from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { invalid, SwitchyardError } from "../errors.js";
import { type EnqueueStreamResponse, EnqueueStreamResponseSchema } from "../gen/switchyard/v1/queue_pb.js";
import type { Logger } from "../log.js";
import { ItemIds } from "../queue/item-ids.js";
import { ScheduledEnqueue, type Queues } from "../queue/queues.js";
import { RefusedMessage } from "./access.js";
import { MalformedMessage, PreEncoded } from "./adapter.js";
import { encodeEnqueueStreamIds, encodeEnqueueStreamResult, type EnqueueCall, type EnqueueStreamCall } from "./enqueue-wire.js";
import { durationMs } from "./convert.js";
import { assertWellFormed, callLogger, toStatus, type SwitchyardStatus } from "./status.js";
import { traceOf, withTrace, type TraceContext } from "./trace.js";

const METHOD = "EnqueueStream";
/** Requests of one stream running at once; reading resumes below half of it. */
const MAX_IN_FLIGHT = 128;

/** Runs one Enqueue request, as the unary call and the stream both do; resolves to the ids. */
export async function runEnqueue(queues: Queues, req: EnqueueCall, trace: TraceContext | undefined): Promise<ItemIds | ScheduledEnqueue> {
  const items = withTrace(req.items, trace);
  const wait = req.minReplicas > 0 ? { replicas: req.minReplicas, timeoutMs: durationMs("replica_timeout", req.replicaTimeout) || 1000 } : undefined;
  return queues.enqueueIds(req.queue, items, durationMs("ttl", req.ttl) ?? 0, wait);
}

type Incoming = EnqueueStreamCall | MalformedMessage | RefusedMessage;
type Duplex = grpc.ServerDuplexStream<Incoming, EnqueueStreamResponse | PreEncoded>;

/** The EnqueueStream handler. */
export function enqueueStreamHandler(queues: Queues, baseLog: Logger) {
  return (call: Duplex) => {
    const log = callLogger(baseLog, call.metadata);
    if (queues.isDraining) {
      call.emit("error", toStatus(new SwitchyardError("unavailable", "this instance is shutting down; send to another instance", { reason: "SHUTTING_DOWN" }), log, METHOD));
      return;
    }
    const trace = traceOf(call.metadata);
    let inFlight = 0;
    /** No more messages will be read: the client half-closed, or the instance drains. */
    let closing = false;
    let ended = false;

    const finish = (err?: unknown) => {
      if (ended) return;
      ended = true;
      stopListening();
      if (err) call.emit("error", toStatus(err, log, METHOD));
      else call.end();
    };
    const endWhenAnswered = () => {
      if (closing && inFlight === 0) finish();
    };
    let stopListening = () => {};
    stopListening = queues.onDrain(() => {
      closing = true;
      call.pause();
      endWhenAnswered();
    });
    const answer = (id: number, outcome: ItemIds | ScheduledEnqueue | SwitchyardStatus) => {
      if (ended) return;
      if (outcome instanceof ItemIds) call.write(new PreEncoded(encodeEnqueueStreamIds(id, outcome)));
      else if (outcome instanceof ScheduledEnqueue) call.write(new PreEncoded(encodeEnqueueStreamResult(id, outcome.ids, outcome.duplicates)));
      else call.write(create(EnqueueStreamResponseSchema, { id, code: outcome.code, message: outcome.details, reason: outcome.reason }));
    };

    call.on("data", (raw: Incoming) => {
      if (ended || closing) return;
      if (raw instanceof RefusedMessage) {
        // A malformed message has no id to answer: like any malformed message, it ends the call.
        if (raw.message instanceof MalformedMessage) finish(raw.error);
        else answer((raw.message as EnqueueStreamCall).id, toStatus(raw.error, log, METHOD));
        return;
      }
      let msg: EnqueueStreamCall;
      try {
        msg = assertWellFormed(raw);
      } catch (err) {
        finish(err);
        return;
      }
      if (++inFlight >= MAX_IN_FLIGHT) call.pause();
      const { id, request } = msg;
      (request ? runEnqueue(queues, request, trace) : Promise.reject(invalid("request is required: the EnqueueRequest to run", "request")))
        .then(
          (ids) => answer(id, ids),
          (err: unknown) => answer(id, toStatus(err, log, METHOD)),
        )
        .finally(() => {
          inFlight--;
          if (!closing && inFlight <= MAX_IN_FLIGHT / 2 && call.isPaused()) call.resume();
          endWhenAnswered();
        });
    });
    call.on("end", () => {
      closing = true;
      endWhenAnswered();
    });
    for (const event of ["cancelled", "close"]) {
      call.on(event, () => {
        ended = true;
        stopListening();
      });
    }
  };
}
