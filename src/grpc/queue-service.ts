/**
 * gRPC handlers of switchyard.v1.QueueService: each translates messages to a
 * call on the Queues domain object and back. No Redis logic lives here.
 */
import * as grpc from "@grpc/grpc-js";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { invalid } from "../errors.js";
import {
  type AckRequest,
  AckResponseSchema,
  CreateQueueResponseSchema,
  DeleteQueueResponseSchema,
  DropResponseSchema,
  type EnqueueItem,
  ExtendLeaseResponseSchema,
  GetQueueResponseSchema,
  GetQueueStatsResponseSchema,
  type LeaseRequest,
  type LeaseResponse,
  LeaseResponseSchema,
  ListQueuesResponseSchema,
  type PeekQueueRequest,
  PeekQueueResponseSchema,
  PurgeQueueResponseSchema,
  RequeueDeadLettersResponseSchema,
  DeleteDeadLettersResponseSchema,
  QueueList,
  QueueStatsSchema,
  RetryResponseSchema,
  type RetryRequest,
  type DropRequest,
  type UpdateQueueRequest,
  UpdateQueueResponseSchema,
  PauseQueueResponseSchema,
  ResumeQueueResponseSchema,
  type CreateConsumerGroupRequest,
  CreateConsumerGroupResponseSchema,
  type SetConsumerGroupPositionRequest,
  SetConsumerGroupPositionResponseSchema,
  type DeleteConsumerGroupRequest,
  DeleteConsumerGroupResponseSchema,
} from "../gen/switchyard/v1/queue_pb.js";
import type { Logger } from "../log.js";
import type { Clock } from "../clock.js";
import type { Delivery, LeaseStream } from "../queue/lease-stream.js";
import { ScheduledEnqueue, type AckReply, type NewItem, type Queues, type SettleOptions, type WorkerSettle } from "../queue/queues.js";
import { applyUpdate } from "../queue/declaration.js";
import { checkSelection } from "../queue/admin.js";
import { MalformedMessage, PreEncoded } from "./adapter.js";
import { encodeDeliveryMessages } from "./delivery-wire.js";
import { encodeEnqueueResponse, encodeEnqueueResponseIds, type EnqueueCall } from "./enqueue-wire.js";
import { ItemIds } from "../queue/item-ids.js";
import { extrasSchedule } from "../queue/new-items.js";
import { durationMs, modeMessage, msDuration, msTimestamp, queueMessage, queueSpec } from "./convert.js";
import { assertWellFormed, callLogger, toStatus, unary, type SwitchyardStatus } from "./status.js";
import { traceOf } from "./trace.js";
import { callerOf, refusal } from "./auth-interceptor.js";
import { enqueueStreamHandler, runEnqueue } from "./enqueue-stream.js";
import type { DeliveryBuffers } from "./delivery-buffers.js";

/** What Lease streams need besides the queues. */
export interface LeaseSettings {
  clock: Clock;
  heartbeatIntervalMs: number;
  /** A stream that sends no open this long is ended. */
  openTimeoutMs: number;
  /** The highest credit a stream may have (SWITCHYARD_MAX_CREDIT): also the most tokens in one ack_batch or release. */
  maxCredit: number;
  /** Bounds the delivery bytes waiting for workers that do not read. */
  buffers: DeliveryBuffers;
  /** The largest message the server sends (SWITCHYARD_MAX_MESSAGE_BYTES). */
  maxMessageBytes: number;
}

/** What a worker that announces no limit accepts: gRPC's default receive limit. */
export const DEFAULT_WORKER_MESSAGE_BYTES = 4 * 1024 * 1024;

/** The least a worker may announce it receives (less would dead-letter most items of a queue). */
export const MIN_WORKER_MESSAGE_BYTES = 64 * 1024;

/** The largest delivery message a stream may be sent: what its worker accepts, and the server sends. */
function messageLimit(announced: number, settings: LeaseSettings): number {
  if (announced && announced < MIN_WORKER_MESSAGE_BYTES) {
    throw invalid(`max_message_bytes is ${announced}; announce at least ${MIN_WORKER_MESSAGE_BYTES} (0: gRPC's default, 4 MiB)`, "open.max_message_bytes");
  }
  return Math.min(announced || DEFAULT_WORKER_MESSAGE_BYTES, settings.maxMessageBytes);
}

/** An ack's reply items, with their schedules and idempotency keys (enqueued as an Enqueue's items would be). */
function newItems(items: EnqueueItem[]): NewItem[] {
  return items.map((i, n) => {
    if (i.notBefore && i.delay) throw invalid(`replies[${n}].delay is given with not_before; give one of them`, `replies[${n}].delay`);
    return { payload: i.payload, headers: i.headers, schedule: extrasSchedule(i), idempotencyKey: i.idempotencyKey || undefined };
  });
}

/**
 * An ack's replies. Their route needs enqueue as a named reply_queue does in
 * the access table (SPEC Q9, S6), also when it is the queue's standing one,
 * which only the ack finds: a lease scope alone must not write elsewhere.
 */
function replyOf(req: AckRequest, method: string, metadata: grpc.Metadata): AckReply | undefined {
  if (req.replies.length === 0) return undefined;
  const mayEnqueue = (queue: string) => {
    const err = refusal(method, callerOf(metadata), [{ scope: "queue:enqueue", queue }]);
    if (err) throw err;
  };
  return { queue: req.replyQueue || undefined, items: newItems(req.replies), ttlMs: durationMs("reply_ttl", req.replyTtl) ?? 0, mayEnqueue };
}

/** An EnqueueResponse for what an enqueue answered. */
function enqueueResponse(out: ItemIds | ScheduledEnqueue): Buffer {
  return out instanceof ItemIds ? encodeEnqueueResponseIds(out) : encodeEnqueueResponse(out);
}

/** What a Retry says: its reason and, when given, its own delay. */
function retryOptions(req: RetryRequest): SettleOptions {
  return { reason: req.reason, delayMs: durationMs("delay", req.delay) };
}


type Duplex = grpc.ServerDuplexStream<LeaseRequest | MalformedMessage, LeaseResponse | PreEncoded>;

/** Runs one Lease stream (see the state notes in queue.proto's Lease rpc). */
function leaseHandler(queues: Queues, baseLog: Logger, settings: LeaseSettings) {
  return (call: Duplex) => {
    const log = callLogger(baseLog, call.metadata);
    let stream: Promise<LeaseStream> | undefined;
    // Ending: no more deliveries. Done: the call has ended, nothing more is written.
    let ended = false;
    let done = false;
    // Delivery bytes not yet taken by the connection; resumed streams take deliveries again.
    let opened: LeaseStream | undefined;
    const buffer = settings.buffers.open(() => opened && queues.resume(opened));
    // A stream that never opens would hold its slot, its call and its connection forever.
    const openTimer = settings.clock.setTimer(settings.openTimeoutMs, () => {
      if (!stream) {
        finish(invalid(`no open within ${settings.openTimeoutMs} ms: send open {queue, credit} first, at once (SWITCHYARD_LEASE_OPEN_TIMEOUT)`));
      }
    });
    // Settles received on this stream and not yet applied: the stream's items go back only after them.
    const pending = new Set<Promise<unknown>>();
    // Results of settles still being applied go out while the stream ends (a worker that
    // half-closes right after its settles, before its open was answered, still gets them).
    const write = (kind: MessageInitShape<typeof LeaseResponseSchema>["kind"]) => {
      if (!done) call.write(create(LeaseResponseSchema, { kind }));
    };
    // Ends the call once the stream's settles are applied and its unsettled items are back in
    // the queue, so a worker that sees the end knows where every item it held is.
    const finish = (err?: unknown) => {
      if (ended) return;
      ended = true;
      openTimer.cancel();
      buffer.close();
      const opening = stream;
      void Promise.allSettled([...pending])
        .then(() => opening?.then((s) => queues.closeStream(s), () => undefined))
        .catch((e: unknown) => log.warn("could not return a closed stream's items", { err: e }))
        .finally(() => {
          done = true;
          if (err) call.emit("error", toStatus(err, log, "Lease"));
          else call.end();
        });
    };
    const settleFailed = (token: string, status: SwitchyardStatus) =>
      write({ case: "settleResult", value: { leaseToken: token, code: status.code, message: status.details, reason: status.reason } });
    const settle = async (s: LeaseStream, token: string, action: WorkerSettle, opts: SettleOptions = {}, ack?: AckRequest) => {
      try {
        if (ack) await queues.ack(token, replyOf(ack, "Lease", call.metadata), s);
        else {
          const outcome = await queues.settle(token, action, opts, s);
          if (action === "extend") {
            write({ case: "settleResult", value: { leaseToken: token, code: 0, expireTime: msTimestamp(outcome.expireTimeMs) } });
          }
        }
      } catch (err) {
        // Redis unavailable (a cluster slot migrating, say) is UNAVAILABLE: the worker may settle again.
        settleFailed(token, toStatus(err, log, "Lease"));
      }
    };
    // Acks of many tokens: one settle call per queue; each token that failed gets its own result.
    const ackBatch = async (s: LeaseStream, tokens: readonly string[]) => {
      if (tokens.length > settings.maxCredit) {
        finish(invalid(`ack_batch of ${tokens.length} tokens; send at most ${settings.maxCredit} per message (SWITCHYARD_MAX_CREDIT: no stream holds more)`, "ack_batch.lease_tokens"));
        return;
      }
      try {
        for (const { token, error } of await queues.ackMany(tokens, s)) settleFailed(token, toStatus(error, log, "Lease"));
      } catch (err) {
        // Redis could not be asked (UNAVAILABLE, say): the worker may ack every token again.
        const status = toStatus(err, log, "Lease");
        for (const token of tokens) settleFailed(token, status);
      }
    };
    // Deliveries the worker never started, back to the queue uncounted; each refused token gets its own result.
    const release = async (s: LeaseStream, tokens: readonly string[]) => {
      if (tokens.length > settings.maxCredit) {
        finish(invalid(`release of ${tokens.length} tokens; send at most ${settings.maxCredit} per message (SWITCHYARD_MAX_CREDIT: no stream holds more)`, "release.lease_tokens"));
        return;
      }
      for (const { token, error } of await queues.releaseUnstarted(tokens, s)) settleFailed(token, toStatus(error, log, "Lease"));
    };
    call.on("data", (raw: LeaseRequest | MalformedMessage) => {
      try {
        const msg = assertWellFormed(raw);
        const kind = msg.kind;
        if (!stream) {
          if (kind.case !== "open") throw invalid("the first message on a Lease stream must be open {queue, credit}", "open");
          openTimer.cancel();
          const maxBytes = messageLimit(kind.value.maxMessageBytes, settings);
          stream = queues.openStream(kind.value.queue, kind.value.credit, {
            deliver: (batch, undeliverable) => {
              if (ended) return false;
              const tooLarge = (d: Delivery, bytes: number) =>
                undeliverable?.(d, `the item cannot be delivered: alone it takes a ${bytes}-byte message, and a delivery message ` +
                  `to this worker is at most ${maxBytes} bytes (LeaseOpen.max_message_bytes, default 4 MiB, and SWITCHYARD_MAX_MESSAGE_BYTES)`);
              for (const message of encodeDeliveryMessages(batch, maxBytes, tooLarge)) call.write(message, buffer.wrote(message.bytes.length));
              return true;
            },
            backlogged: () => buffer.backlogged(),
            heartbeat: (now) => ended || write({ case: "heartbeat", value: { serverTime: msTimestamp(now) } }),
            fail: (err) => finish(err),
            drain: (graceMs) => ended || write({ case: "drain", value: { grace: msDuration(graceMs) } }),
            end: () => finish(),
          }, kind.value.group);
          stream.then(
            async (s) => {
              opened = s;
              const config = s.config;
              // Written while the stream ends too: results of settles sent with the open follow it.
              write({
                case: "opened",
                value: {
                  queue: s.queue,
                  mode: modeMessage(config.mode),
                  heartbeatInterval: msDuration(settings.heartbeatIntervalMs),
                  ackBatches: true,
                  releases: true,
                  maxCredit: settings.maxCredit,
                  minIdle: config.minIdleMs ? msDuration(config.minIdleMs) : undefined,
                  paused: config.paused,
                },
              });
              if (ended) void queues.closeStream(s);
            },
            (err: unknown) => finish(err),
          );
          return;
        }
        if (kind.case === "open") throw invalid("open may be sent only once per Lease stream");
        const work = stream.then((s) => {
          switch (kind.case) {
            case "ack":
              return settle(s, kind.value.leaseToken, "ack", {}, kind.value);
            case "retry":
              return settle(s, kind.value.leaseToken, "retry", retryOptions(kind.value));
            case "drop":
              return settle(s, kind.value.leaseToken, "drop", { reason: kind.value.reason });
            case "extend":
              return settle(s, kind.value.leaseToken, "extend");
            case "ackBatch":
              return ackBatch(s, kind.value.leaseTokens);
            case "release":
              return release(s, kind.value.leaseTokens);
            case "credit":
              try {
                queues.setCredit(s, kind.value.credit);
              } catch (err) {
                finish(err);
              }
              return;
            default:
              finish(invalid("empty LeaseRequest: set one of open, ack, ack_batch, retry, drop, extend, credit or release"));
          }
        }, () => undefined);
        pending.add(work);
        void work.finally(() => pending.delete(work));
      } catch (err) {
        finish(err);
      }
    });
    call.on("end", () => finish());
    call.on("cancelled", () => finish());
    call.on("error", () => finish());
    call.on("close", () => finish());
  };
}

/** The QueueService implementation for grpc-js. */
export function queueServiceHandlers(queues: Queues, log: Logger, lease: LeaseSettings): grpc.UntypedServiceImplementation {
  return {
    createQueue: unary(log, "CreateQueue", async (req: { queue?: Parameters<typeof queueSpec>[0] }) =>
      create(CreateQueueResponseSchema, { queue: queueMessage(await queues.registry.create(queueSpec(req.queue))) }),
    ),
    getQueue: unary(log, "GetQueue", async (req: { name: string }) =>
      create(GetQueueResponseSchema, { queue: queueMessage(await queues.registry.get(req.name)) }),
    ),
    updateQueue: unary(log, "UpdateQueue", async (req: UpdateQueueRequest) => {
      const given = queueSpec(req.queue);
      const paths = req.updateMask?.paths ?? [];
      const updated = await queues.registry.update(given.name, (stored) => applyUpdate(stored, given, paths, queues.registry.namespace));
      return create(UpdateQueueResponseSchema, { queue: queueMessage(updated) });
    }),
    pauseQueue: unary(log, "PauseQueue", async (req: { name: string }) =>
      create(PauseQueueResponseSchema, { queue: queueMessage(await queues.registry.update(req.name, (c) => ({ ...c, paused: true }))) }),
    ),
    resumeQueue: unary(log, "ResumeQueue", async (req: { name: string }) =>
      create(ResumeQueueResponseSchema, { queue: queueMessage(await queues.registry.update(req.name, (c) => ({ ...c, paused: false }))) }),
    ),
    listQueues: unary(log, "ListQueues", async (req: { pageSize: number; pageToken: string }) => {
      const page = await queues.registry.list(req.pageSize, req.pageToken);
      return create(ListQueuesResponseSchema, { queues: page.queues.map(queueMessage), nextPageToken: page.nextPageToken });
    }),
    deleteQueue: unary(log, "DeleteQueue", async (req: { name: string; purge: boolean }) => {
      await queues.registry.delete(req.name, req.purge);
      return create(DeleteQueueResponseSchema, {});
    }),
    getQueueStats: unary(log, "GetQueueStats", async (req: { name: string }) => {
      const s = await queues.stats(req.name);
      return create(GetQueueStatsResponseSchema, {
        stats: create(QueueStatsSchema, {
          queue: s.queue,
          ready: BigInt(s.ready),
          processing: BigInt(s.processing),
          deadLetter: BigInt(s.deadLetter),
          oldestClaimAge: s.oldestClaimAgeMs === undefined ? undefined : msDuration(s.oldestClaimAgeMs),
          leaseStreams: s.leaseStreams,
          leasedTotal: BigInt(s.leased),
          completedTotal: BigInt(s.completed),
          delayed: BigInt(s.delayed),
          paused: s.paused,
          groups: s.groups.map((g) => ({
            name: g.name,
            pending: BigInt(g.pending),
            lag: BigInt(g.lag ?? -1),
            oldestPendingIdle: g.oldestPendingIdleMs === undefined ? undefined : msDuration(g.oldestPendingIdleMs),
            consumers: g.consumers,
            lastDeliveredId: g.lastDeliveredId,
          })),
        }),
      });
    }),
    peekQueue: unary(log, "PeekQueue", async (req: PeekQueueRequest) => {
      const list = req.list === QueueList.DEAD_LETTER ? "dead_letter" : req.list === QueueList.DELAYED ? "delayed" : "ready";
      const page = await queues.peek(req.name, list, req.limit);
      return create(PeekQueueResponseSchema, {
        total: BigInt(page.total),
        items: page.items.map((i) => ({
          id: i.id,
          payload: i.payload,
          headers: i.headers,
          enqueueTime: i.enqueueTimeMs ? msTimestamp(i.enqueueTimeMs) : undefined,
          deliveryCount: i.deliveryCount,
          lastError: i.lastError,
          notBefore: msTimestamp(i.notBeforeMs),
        })),
      });
    }),
    purgeQueue: unary(log, "PurgeQueue", async (req: { name: string }) =>
      create(PurgeQueueResponseSchema, { purged: BigInt(await queues.purge(req.name)) }),
    ),
    requeueDeadLetters: unary(log, "RequeueDeadLetters", async (req: { name: string; ids: string[]; all: boolean }) => {
      const n = await queues.settleDeadLetters(req.name, "requeue", checkSelection(req.ids, req.all));
      return create(RequeueDeadLettersResponseSchema, { requeued: BigInt(n) });
    }),
    deleteDeadLetters: unary(log, "DeleteDeadLetters", async (req: { name: string; ids: string[]; all: boolean }) => {
      const n = await queues.settleDeadLetters(req.name, "delete", checkSelection(req.ids, req.all));
      return create(DeleteDeadLettersResponseSchema, { deleted: BigInt(n) });
    }),
    createConsumerGroup: unary(log, "CreateConsumerGroup", async (req: CreateConsumerGroupRequest) => {
      if (!req.group) throw invalid("group is required: {name, start_id}", "group");
      const config = await queues.createGroup(req.name, req.group);
      return create(CreateConsumerGroupResponseSchema, { queue: queueMessage(config) });
    }),
    setConsumerGroupPosition: unary(log, "SetConsumerGroupPosition", async (req: SetConsumerGroupPositionRequest) => {
      await queues.moveGroup(req.name, req.group, req.id);
      return create(SetConsumerGroupPositionResponseSchema, {});
    }),
    deleteConsumerGroup: unary(log, "DeleteConsumerGroup", async (req: DeleteConsumerGroupRequest) => {
      const config = await queues.deleteGroup(req.name, req.group);
      return create(DeleteConsumerGroupResponseSchema, { queue: queueMessage(config) });
    }),
    // The request arrives read by readEnqueueRequest (adapter.ts): its items still in the request's bytes.
    enqueue: unary(log, "Enqueue", async (req: EnqueueCall, call) =>
      new PreEncoded(enqueueResponse(await runEnqueue(queues, req, traceOf(call.metadata)))),
    ),
    enqueueStream: enqueueStreamHandler(queues, log),
    lease: leaseHandler(queues, log, lease),
    ack: unary(log, "Ack", async (req: AckRequest, call) =>
      create(AckResponseSchema, { replyIds: await queues.ack(req.leaseToken, replyOf(req, "Ack", call.metadata)) }),
    ),
    retry: unary(log, "Retry", async (req: RetryRequest) => {
      const outcome = await queues.settle(req.leaseToken, "retry", retryOptions(req));
      return create(RetryResponseSchema, { deadLettered: outcome.deadLettered, notBefore: msTimestamp(outcome.dueMs) });
    }),
    drop: unary(log, "Drop", async (req: DropRequest) => {
      await queues.settle(req.leaseToken, "drop", { reason: req.reason });
      return create(DropResponseSchema, {});
    }),
    extendLease: unary(log, "ExtendLease", async (req: { leaseToken: string }) => {
      const outcome = await queues.settle(req.leaseToken, "extend");
      return create(ExtendLeaseResponseSchema, { expireTime: msTimestamp(outcome.expireTimeMs) });
    }),
  };
}
