/**
 * A typed TypeScript client for Switchyard, built on the generated protobuf-es
 * code and the same grpc-js adapter the server uses.
 */
import * as grpc from "@grpc/grpc-js";
import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type AckResponse,
  type Delivery,
  type EnqueueItem,
  type EnqueueStreamResponse,
  type ExtendLeaseResponse,
  type LeaseOpened,
  type LeaseRequest,
  LeaseRequestSchema,
  type LeaseResponse,
  type ListQueuesResponse,
  type PeekQueueResponse,
  type Queue,
  QueueList,
  type QueueSchema,
  QueueService,
  type QueueStats,
  type RetryResponse,
  type SettleResult,
} from "../gen/switchyard/v1/queue_pb.js";
import {
  CronService,
  type GetSchedulerStatusResponse,
  type Job,
  type JobSchema,
  type JobStatus,
  type ListJobLogsResponse,
  type ListJobsRequestSchema,
  type ListJobsResponse,
  type PreviewScheduleResponse,
} from "../gen/switchyard/v1/cron_pb.js";
import { AuditService, type ListAuditLogsResponse } from "../gen/switchyard/v1/audit_pb.js";
import { AuthService, type GetCallerResponse } from "../gen/switchyard/v1/auth_pb.js";
import { clientConstructor, PreEncoded } from "../grpc/adapter.js";
import { encodeAckBatch } from "../grpc/lease-wire.js";
import { encodeEnqueueRequest, type EnqueueRequestFields } from "../grpc/enqueue-wire.js";
import { EnqueueBatcher } from "./enqueue-batcher.js";
import { EnqueueStream } from "./enqueue-stream.js";

/** Something to enqueue: bytes, a string (UTF-8), or an item with headers. */
export type ItemInput =
  | Uint8Array
  | string
  | {
      payload: Uint8Array | string;
      headers?: Record<string, string>;
      /** Not delivered before this long from now (ms). */
      delayMs?: number;
      /** Not delivered before this time. */
      notBefore?: Date;
      /** Another enqueue of the same key on the queue within its idempotency window adds nothing and answers the first id. */
      idempotencyKey?: string;
    };

/** Options for the client. */
export interface ClientOptions {
  credentials?: grpc.ChannelCredentials;
  channelOptions?: grpc.ChannelOptions;
  /** Deadline for unary calls (ms). Default 30 s. */
  timeoutMs?: number;
  /** A bearer token, sent as `authorization: Bearer <token>` on every call, Lease streams included. */
  token?: string;
  /**
   * Merge `enqueue()` calls to one queue made in the same event-loop turn into
   * one Enqueue RPC (default true; see enqueue-batcher.ts). Each call still
   * gets its own ids and, when only it is at fault, its own error.
   */
  coalesceEnqueues?: boolean;
  /**
   * Send `enqueue()` calls as messages on one EnqueueStream (default true; see
   * enqueue-stream.ts) rather than as unary Enqueue calls, which cost several
   * times more on both sides. A server without EnqueueStream gets unary calls.
   */
  enqueueStream?: boolean;
}

/** A client interceptor that adds the bearer token to every call's metadata. */
function bearer(token: string): grpc.Interceptor {
  return (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start: (metadata, listener, next) => {
        metadata.set("authorization", `Bearer ${token}`);
        next(metadata, listener);
      },
    });
}

/** Reply items sent with an ack (SPEC Q9). */
export interface Reply {
  /** Where the replies go; left out, the queue's standing route (its declaration's `replyQueue`). */
  queue?: string;
  items: ItemInput[];
  ttlMs?: number;
}

type Unary = (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: unknown) => void) => grpc.ClientUnaryCall;

/** Options of one unary call. */
export interface CallOptions {
  /** This call's deadline (ms from now), instead of the client's `timeoutMs`. */
  timeoutMs?: number;
  /** Cancels the call when it aborts (the promise rejects with CANCELLED). */
  signal?: AbortSignal;
}

/** The CANCELLED error of a call whose signal had aborted before it was sent. */
function cancelledBefore(method: string, signal: AbortSignal): grpc.ServiceError {
  const err = new Error(`${grpc.status.CANCELLED} CANCELLED: ${method} not sent: its signal had aborted (${String(signal.reason)})`);
  return Object.assign(err, { code: grpc.status.CANCELLED, details: `${method} not sent: its signal had aborted`, metadata: new grpc.Metadata() });
}

/** setTimeout's longest wait (about 24.8 days): the longest deadline a call or the client may set; Infinity sets none. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * `ms` if it is a deadline grpc-js can keep. NaN or a wait beyond 1e8 hours made grpc-js
 * throw outside the call (an unhandled rejection) and the call never ended.
 */
function checkTimeout(ms: number, name: string): number {
  if (ms === Infinity || (Number.isFinite(ms) && ms >= 0 && ms <= MAX_TIMEOUT_MS)) return ms;
  throw new RangeError(`${name} is ${ms}; give 0 to ${MAX_TIMEOUT_MS} ms (about 24.8 days), or Infinity for no deadline`);
}

/**
 * A string payload's UTF-8 bytes. Buffer.from takes a small one from Node's shared pool, where
 * TextEncoder makes a new ArrayBuffer each time: about half the cost on a paced producer (a probe,
 * 5 against 13 µs after 10 ms asleep). The bytes are the same, lone surrogates as U+FFFD included.
 */
const utf8 = (text: string): Uint8Array => Buffer.from(text, "utf8");

/** The EnqueueItem create(EnqueueItemSchema, …) would make, without its generic walk over the fields. */
function item(payload: Uint8Array, headers?: Record<string, string> | null): EnqueueItem {
  return { $typeName: "switchyard.v1.EnqueueItem", payload, headers: headers ?? {}, idempotencyKey: "" };
}

function toItem(input: ItemInput): EnqueueItem {
  if (typeof input === "string") return item(utf8(input));
  if (input instanceof Uint8Array) return item(input);
  const out = item(typeof input.payload === "string" ? utf8(input.payload) : input.payload, input.headers);
  if (input.delayMs !== undefined) out.delay = durationFromMs(input.delayMs);
  if (input.notBefore) out.notBefore = timestampFromMs(input.notBefore.getTime());
  if (input.idempotencyKey) out.idempotencyKey = input.idempotencyKey;
  return out;
}

function replyFields(reply?: Reply) {
  if (!reply) return {};
  return {
    replyQueue: reply.queue,
    replies: reply.items.map(toItem),
    replyTtl: reply.ttlMs ? durationFromMs(reply.ttlMs) : undefined,
  };
}

/** A client of QueueService and CronService. */
export class SwitchyardClient {
  readonly grpc: grpc.Client;
  readonly cronGrpc: grpc.Client;
  readonly auditGrpc: grpc.Client;
  readonly authGrpc: grpc.Client;
  private readonly enqueues?: EnqueueBatcher;
  private readonly enqueueStream?: EnqueueStream;
  private readonly timeoutMs: number;
  /** The largest message this client's channel receives, announced when a Lease stream opens. */
  private readonly receiveLimit: number;

  constructor(address: string, options: ClientOptions = {}) {
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    // No channelz service reads the client's channel statistics; keeping them costs ~5% of a unary call's CPU.
    const clientOptions: grpc.ClientOptions = { "grpc.enable_channelz": 0, ...options.channelOptions };
    if (options.token) clientOptions.interceptors = [...(clientOptions.interceptors ?? []), bearer(options.token)];
    this.grpc = new (clientConstructor(QueueService))(address, credentials, clientOptions);
    this.cronGrpc = new (clientConstructor(CronService))(address, credentials, clientOptions);
    this.auditGrpc = new (clientConstructor(AuditService))(address, credentials, clientOptions);
    this.authGrpc = new (clientConstructor(AuthService))(address, credentials, clientOptions);
    this.timeoutMs = checkTimeout(options.timeoutMs ?? 30_000, "ClientOptions.timeoutMs");
    // grpc-js receives at most 4 MiB unless told otherwise (-1: no limit, the most a uint32 can announce).
    const receive = clientOptions["grpc.max_receive_message_length"] as number | undefined;
    this.receiveLimit = receive === undefined ? 4 * 1024 * 1024 : receive < 0 ? 0xffffffff : Math.min(receive, 0xffffffff);
    if (options.enqueueStream ?? true) {
      const open = () => (this.grpc as unknown as { enqueueStream(): grpc.ClientDuplexStream<PreEncoded, EnqueueStreamResponse> }).enqueueStream();
      this.enqueueStream = new EnqueueStream(open, (request) => this.unaryEnqueue(request), this.timeoutMs);
    }
    if (options.coalesceEnqueues ?? true) {
      this.enqueues = new EnqueueBatcher((queue, items, ttlMs) => this.sendEnqueue({ queue, items, ttl: ttlMs ? durationFromMs(ttlMs) : undefined }));
    }
  }

  /** One Enqueue request, on the stream unless the client was made without it. */
  private sendEnqueue(request: EnqueueRequestFields): Promise<string[]> {
    return this.enqueueStream ? this.enqueueStream.send(request) : this.unaryEnqueue(request);
  }

  /**
   * One unary Enqueue RPC; resolves to the ids. The request is written here rather
   * than by the adapter's serializer because grpc-js keeps what it is given
   * until the call ends, and bytes cost the garbage collector nothing where a
   * thousand item objects cost it a copy at every collection meanwhile. A
   * request the encoder refuses goes to grpc-js as it is, whose serializer
   * then fails the call as it always did (INTERNAL, serialization failure).
   */
  private unaryEnqueue(request: EnqueueRequestFields, call?: CallOptions): Promise<string[]> {
    let message: object;
    try {
      message = new PreEncoded(encodeEnqueueRequest(request));
    } catch {
      message = request;
    }
    return this.call<{ ids: string[] }>("enqueue", message, call).then((r) => r.ids);
  }

  /**
   * One unary call, with the call's own deadline (else the client's) and, when
   * given a signal, cancelled when it aborts: the promise then rejects with
   * CANCELLED, and a signal aborted already sends nothing.
   */
  private send<Res>(client: grpc.Client, input: DescMessage, method: string, request: object, call: CallOptions = {}): Promise<Res> {
    const fn = (client as unknown as Record<string, Unary>)[method].bind(client);
    const { signal } = call;
    if (signal?.aborted) return Promise.reject(cancelledBefore(method, signal));
    let timeoutMs: number;
    try {
      timeoutMs = checkTimeout(call.timeoutMs ?? this.timeoutMs, `${method}'s timeoutMs`);
    } catch (err) {
      return Promise.reject(err);
    }
    const message = request instanceof PreEncoded ? request : create(input, request as Record<string, unknown>);
    const deadline = Date.now() + timeoutMs;
    return new Promise((ok, fail) => {
      const cancel = () => unary.cancel();
      const unary = fn(message, new grpc.Metadata(), { deadline }, (err, res) => {
        signal?.removeEventListener("abort", cancel);
        if (err) fail(err);
        else ok(res as Res);
      });
      signal?.addEventListener("abort", cancel, { once: true });
    });
  }

  private call<Res>(method: keyof typeof QueueService.method, request: object, call?: CallOptions): Promise<Res> {
    return this.send(this.grpc, QueueService.method[method].input, method, request, call);
  }

  private cron<Res>(method: keyof typeof CronService.method, request: object, call?: CallOptions): Promise<Res> {
    return this.send(this.cronGrpc, CronService.method[method].input, method, request, call);
  }

  /** Audit log entries (mutating calls), newest first; needs scope sys:audit:list. */
  listAuditLogs(pageSize = 0, pageToken = "", call: CallOptions = {}): Promise<ListAuditLogsResponse> {
    return this.send(this.auditGrpc, AuditService.method.listAuditLogs.input, "listAuditLogs", { pageSize, pageToken }, call);
  }

  /** Who the server takes this client for, and its scopes. */
  getCaller(call: CallOptions = {}): Promise<GetCallerResponse> {
    return this.send(this.authGrpc, AuthService.method.getCaller.input, "getCaller", {}, call);
  }

  /** Declares a queue; resolves to the stored declaration. */
  async createQueue(queue: MessageInitShape<typeof QueueSchema>, call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("createQueue", { queue }, call)).queue;
  }

  async getQueue(name: string, call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("getQueue", { name }, call)).queue;
  }

  /** Changes the settings named by `paths` (e.g. "max_deliveries", "retry_policy") to those of `queue`; resolves to the stored declaration. */
  async updateQueue(queue: MessageInitShape<typeof QueueSchema>, paths: string[], call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("updateQueue", { queue, updateMask: { paths } }, call)).queue;
  }

  /** Stops deliveries of a queue on every instance (enqueues still land). */
  async pauseQueue(name: string, call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("pauseQueue", { name }, call)).queue;
  }

  /** Restarts deliveries of a paused queue. */
  async resumeQueue(name: string, call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("resumeQueue", { name }, call)).queue;
  }

  listQueues(pageSize = 0, pageToken = "", call: CallOptions = {}): Promise<ListQueuesResponse> {
    return this.call("listQueues", { pageSize, pageToken }, call);
  }

  async deleteQueue(name: string, options: { purge?: boolean } = {}, call: CallOptions = {}): Promise<void> {
    await this.call("deleteQueue", { name, purge: options.purge ?? false }, call);
  }

  /** Items of a queue's ready or dead-letter list, next to leave first, without moving them (limit 0: 10). */
  peekQueue(name: string, list: QueueList = QueueList.READY, limit = 0, call: CallOptions = {}): Promise<PeekQueueResponse> {
    return this.call("peekQueue", { name, list, limit }, call);
  }

  /** Deletes the items waiting in a queue; resolves to how many. */
  async purgeQueue(name: string, call: CallOptions = {}): Promise<number> {
    return Number((await this.call<{ purged: bigint }>("purgeQueue", { name }, call)).purged);
  }

  /** Moves dead letters (by item id, or all) back onto their queue; resolves to how many. */
  async requeueDeadLetters(name: string, which: { ids: string[] } | "all", call: CallOptions = {}): Promise<number> {
    const request = which === "all" ? { name, all: true } : { name, ids: which.ids };
    return Number((await this.call<{ requeued: bigint }>("requeueDeadLetters", request, call)).requeued);
  }

  /** Deletes dead letters (by item id, or all); resolves to how many. */
  async deleteDeadLetters(name: string, which: { ids: string[] } | "all", call: CallOptions = {}): Promise<number> {
    const request = which === "all" ? { name, all: true } : { name, ids: which.ids };
    return Number((await this.call<{ deleted: bigint }>("deleteDeadLetters", request, call)).deleted);
  }

  /** STREAM queues: creates consumer group `group` at `startId` ("$" by default, "0" replays the stream). */
  async createConsumerGroup(name: string, group: string, startId = "", call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("createConsumerGroup", { name, group: { name: group, startId } }, call)).queue;
  }

  /** STREAM queues: moves a consumer group to entry `id` ("0": replay everything, "$": skip to the end). */
  async setConsumerGroupPosition(name: string, group: string, id: string, call: CallOptions = {}): Promise<void> {
    await this.call("setConsumerGroupPosition", { name, group, id }, call);
  }

  /** STREAM queues: deletes a consumer group and its pending entries. */
  async deleteConsumerGroup(name: string, group: string, call: CallOptions = {}): Promise<Queue> {
    return (await this.call<{ queue: Queue }>("deleteConsumerGroup", { name, group }, call)).queue;
  }

  async getQueueStats(name: string, call: CallOptions = {}): Promise<QueueStats> {
    return (await this.call<{ stats: QueueStats }>("getQueueStats", { name }, call)).stats;
  }

  /**
   * Enqueues items in order; resolves to their ids. Calls to one queue in the
   * same turn share one request unless the client was made with `coalesceEnqueues: false`
   * or the call waits for replicas. A call with its own deadline or signal goes
   * as a unary Enqueue of its own (give its items idempotency keys if it may be
   * sent again: a cancelled or timed-out call may still have landed).
   */
  async enqueue(
    queue: string,
    items: ItemInput[],
    options: { ttlMs?: number; minReplicas?: number; replicaTimeoutMs?: number } & CallOptions = {},
  ): Promise<string[]> {
    const own = options.timeoutMs !== undefined || options.signal !== undefined;
    if (this.enqueues && !options.minReplicas && !own) return this.enqueues.enqueue(queue, items.map(toItem), options.ttlMs ?? 0);
    const ttl = options.ttlMs ? durationFromMs(options.ttlMs) : undefined;
    const replicaTimeout = options.replicaTimeoutMs ? durationFromMs(options.replicaTimeoutMs) : undefined;
    const request = { queue, items: items.map(toItem), ttl, minReplicas: options.minReplicas ?? 0, replicaTimeout };
    return own ? this.unaryEnqueue(request, options) : this.sendEnqueue(request);
  }

  ack(leaseToken: string, reply?: Reply, call: CallOptions = {}): Promise<AckResponse> {
    return this.call("ack", { leaseToken, ...replyFields(reply) }, call);
  }

  /** Returns a delivery for another attempt, saying why; after `delayMs`, or the queue's retry policy's wait. */
  retry(leaseToken: string, options: { reason?: string; delayMs?: number } = {}, call: CallOptions = {}): Promise<RetryResponse> {
    const delay = options.delayMs === undefined ? undefined : durationFromMs(options.delayMs);
    return this.call("retry", { leaseToken, reason: options.reason ?? "", delay }, call);
  }

  async drop(leaseToken: string, reason = "", call: CallOptions = {}): Promise<void> {
    await this.call("drop", { leaseToken, reason }, call);
  }

  extendLease(leaseToken: string, call: CallOptions = {}): Promise<ExtendLeaseResponse> {
    return this.call("extendLease", { leaseToken }, call);
  }

  /**
   * Opens a lease stream on `queue` with `credit` items in flight at most; a
   * STREAM queue's names the consumer `group`. The server keeps each delivery
   * message within the channel's receive limit (`grpc.max_receive_message_length`,
   * 4 MiB by default), which the open announces.
   */
  lease(queue: string, credit: number, options: { group?: string } = {}): LeaseSession {
    const stream = (this.grpc as unknown as { lease(): grpc.ClientDuplexStream<LeaseRequest | PreEncoded, LeaseResponse> }).lease();
    return new LeaseSession(stream, queue, credit, this.receiveLimit, options.group ?? "");
  }

  /** Creates a job (always UNPUBLISHED); resolves to it with its normalised schedule and next fire times. */
  async createJob(job: MessageInitShape<typeof JobSchema>, call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("createJob", { job }, call)).job;
  }

  async getJob(id: string, call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("getJob", { id }, call)).job;
  }

  listJobs(request: MessageInitShape<typeof ListJobsRequestSchema> = {}, call: CallOptions = {}): Promise<ListJobsResponse> {
    return this.cron("listJobs", request, call);
  }

  /** Updates the fields named in `paths` (snake_case); all populated ones when empty. */
  async updateJob(job: MessageInitShape<typeof JobSchema>, paths: string[] = [], call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("updateJob", { job, updateMask: { paths } }, call)).job;
  }

  async deleteJob(id: string, call: CallOptions = {}): Promise<void> {
    await this.cron("deleteJob", { id }, call);
  }

  async batchDeleteJobs(ids: string[], call: CallOptions = {}): Promise<number> {
    return (await this.cron<{ deleted: number }>("batchDeleteJobs", { ids }, call)).deleted;
  }

  async pauseJob(id: string, call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("pauseJob", { id }, call)).job;
  }

  async resumeJob(id: string, call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("resumeJob", { id }, call)).job;
  }

  async setJobStatus(id: string, status: JobStatus, call: CallOptions = {}): Promise<Job> {
    return (await this.cron<{ job: Job }>("setJobStatus", { id, status }, call)).job;
  }

  /** Runs a job once now, whatever its status; resolves to the id of the log entry it will write. */
  async runOnce(id: string, call: CallOptions = {}): Promise<string> {
    return (await this.cron<{ runId: string }>("runOnce", { id }, call)).runId;
  }

  getSchedulerStatus(call: CallOptions = {}): Promise<GetSchedulerStatusResponse> {
    return this.cron("getSchedulerStatus", {}, call);
  }

  listJobLogs(jobId: string, pageSize = 0, pageToken = "", call: CallOptions = {}): Promise<ListJobLogsResponse> {
    return this.cron("listJobLogs", { jobId, pageSize, pageToken }, call);
  }

  /** A schedule's next fire times (count 0: 5), without storing anything. */
  previewSchedule(schedule: string, timeZone = "", count = 0, call: CallOptions = {}): Promise<PreviewScheduleResponse> {
    return this.cron("previewSchedule", { schedule, timeZone, count }, call);
  }

  close(): void {
    this.enqueueStream?.close();
    this.grpc.close();
    this.cronGrpc.close();
    this.auditGrpc.close();
    this.authGrpc.close();
  }
}

/**
 * One open Lease stream. Iterate it for deliveries; settle each with ack,
 * retry, drop or extend. Failed settles arrive as settle results.
 */
export class LeaseSession implements AsyncIterable<Delivery> {
  /** Resolves once the server accepted the open; rejects with its status otherwise. */
  readonly opened: Promise<LeaseOpened>;
  /** Resolves when the stream ends: undefined when it ended cleanly, else the error. */
  readonly ended: Promise<grpc.ServiceError | undefined>;
  private readonly buffered: Delivery[] = [];
  private waiting?: () => void;
  private done = false;
  /** close() half-closed the stream: nothing more can be written. */
  private closing = false;
  private readonly resultListeners: ((r: SettleResult) => void)[] = [];
  private readonly drainListeners: (() => void)[] = [];
  private heartbeats = 0;
  private settles = 0;
  /** Acks without replies waiting to go out as one ack_batch at the end of this event-loop turn. */
  private acks: string[] = [];
  /** The server accepts ack_batch (it said so when the stream opened). */
  private batchAcks = false;
  drained = false;

  constructor(
    private readonly stream: grpc.ClientDuplexStream<LeaseRequest | PreEncoded, LeaseResponse>,
    queue: string,
    credit: number,
    maxMessageBytes = 0,
    group = "",
  ) {
    let opened!: (o: LeaseOpened) => void;
    let failed!: (e: unknown) => void;
    this.opened = new Promise((ok, fail) => ((opened = ok), (failed = fail)));
    this.opened.catch(() => undefined);
    this.ended = new Promise((ok) => {
      stream.on("data", (msg: LeaseResponse) => {
        const k = msg.kind;
        if (k.case === "opened") {
          this.batchAcks = k.value.ackBatches;
          opened(k.value);
        }
        else if (k.case === "deliveries") this.push(k.value.deliveries);
        else if (k.case === "settleResult") this.resultListeners.forEach((fn) => fn(k.value));
        else if (k.case === "heartbeat") this.heartbeats++;
        else if (k.case === "drain") {
          this.drained = true;
          this.drainListeners.forEach((fn) => fn());
        }
      });
      stream.on("error", (err: grpc.ServiceError) => {
        failed(err);
        this.finish();
        ok(err);
      });
      stream.on("end", () => {
        failed(new Error("lease stream ended before it opened"));
        this.finish();
        ok(undefined);
      });
    });
    this.send({ case: "open", value: { queue, credit, maxMessageBytes, group } });
  }

  /** Acks, retries and drops written to the stream so far (not those made after it ended, which go nowhere). */
  get settlesSent(): number {
    return this.settles;
  }

  /** Heartbeats received so far. */
  get heartbeatCount(): number {
    return this.heartbeats;
  }

  private push(deliveries: Delivery[]): void {
    this.buffered.push(...deliveries);
    this.waiting?.();
  }

  private finish(): void {
    this.done = true;
    this.waiting?.();
  }

  /** Sends a message, after any acks waiting to be batched, so the server sees settles in the order they were made. */
  private send(kind: MessageInitShape<typeof LeaseRequestSchema>["kind"]): void {
    this.flushAcks();
    if (this.done || this.closing) return;
    this.stream.write(create(LeaseRequestSchema, { kind }));
    if (kind?.case === "ack" || kind?.case === "retry" || kind?.case === "drop") this.settles++;
  }

  private flushAcks(): void {
    if (this.acks.length === 0) return;
    const leaseTokens = this.acks;
    this.acks = [];
    if (this.done || this.closing) return;
    this.stream.write(new PreEncoded(encodeAckBatch(leaseTokens)));
    this.settles += leaseTokens.length;
  }

  /** Calls `fn` with every settle result (failures and extends). */
  onSettleResult(fn: (r: SettleResult) => void): void {
    this.resultListeners.push(fn);
  }

  /** Calls `fn` when the server asks the stream to drain (it is shutting down). */
  onDrain(fn: () => void): void {
    this.drainListeners.push(fn);
  }

  /** The stream has ended (cleanly or not): nothing more is sent or received on it. */
  get closed(): boolean {
    return this.done;
  }

  /** The next delivery, or undefined once the stream has ended. */
  async next(): Promise<Delivery | undefined> {
    while (this.buffered.length === 0 && !this.done) {
      await new Promise<void>((ok) => (this.waiting = ok));
      this.waiting = undefined;
    }
    return this.buffered.shift();
  }

  /** Every delivery that has arrived and was not taken yet (waiting for one if none has); empty once the stream has ended. */
  async nextBatch(): Promise<Delivery[]> {
    while (this.buffered.length === 0 && !this.done) {
      await new Promise<void>((ok) => (this.waiting = ok));
      this.waiting = undefined;
    }
    return this.buffered.splice(0);
  }

  /** Waits until `n` deliveries have arrived, and returns them. */
  async take(n: number): Promise<Delivery[]> {
    const out: Delivery[] = [];
    while (out.length < n) {
      const d = await this.next();
      if (!d) throw new Error(`lease stream ended after ${out.length} of ${n} deliveries`);
      out.push(d);
    }
    return out;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Delivery> {
    for (;;) {
      const d = await this.next();
      if (!d) return;
      yield d;
    }
  }

  /**
   * Acknowledges a delivery. Acks without replies made in one event-loop turn
   * go out as one message when the server accepts that; a failed one still
   * comes back as its own settle result.
   */
  ack(leaseToken: string, reply?: Reply): void {
    if (reply || !this.batchAcks) {
      this.send({ case: "ack", value: { leaseToken, ...replyFields(reply) } });
      return;
    }
    if (this.acks.length === 0) setImmediate(() => this.flushAcks());
    this.acks.push(leaseToken);
  }

  /** Returns a delivery for another attempt, saying why; after `delayMs`, or the queue's retry policy's wait. */
  retry(leaseToken: string, options: { reason?: string; delayMs?: number } = {}): void {
    const delay = options.delayMs === undefined ? undefined : durationFromMs(options.delayMs);
    this.send({ case: "retry", value: { leaseToken, reason: options.reason ?? "", delay } });
  }

  drop(leaseToken: string, reason = ""): void {
    this.send({ case: "drop", value: { leaseToken, reason } });
  }

  extend(leaseToken: string): void {
    this.send({ case: "extend", value: { leaseToken } });
  }

  setCredit(credit: number): void {
    this.send({ case: "credit", value: { credit } });
  }

  /**
   * Gives back deliveries never started, uncounted, to the front of their
   * queue (a server that opened the stream with `releases`). One refused
   * comes back as a settle result.
   */
  release(leaseTokens: readonly string[]): void {
    if (leaseTokens.length > 0) this.send({ case: "release", value: { leaseTokens: [...leaseTokens] } });
  }

  /** Ends the stream; the server returns unsettled items to the queue. */
  close(): Promise<grpc.ServiceError | undefined> {
    this.flushAcks();
    if (!this.done && !this.closing) this.stream.end();
    this.closing = true;
    return this.ended;
  }

  /**
   * Cancels the stream at once, as a crashed worker's connection would end.
   * Once more after this turn: grpc-js 1.14.7 starts a call's HTTP/2 stream in a
   * promise continuation after lease() returns, and a cancel before that ends
   * the call here but never reaches the stream it starts anyway (ResolvingCall
   * getConfig), which the server then serves, holding items, until the process
   * exits. The second cancel reaches that stream.
   */
  cancel(): void {
    this.stream.cancel();
    setImmediate(() => this.stream.cancel());
  }
}
