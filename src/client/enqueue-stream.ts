/**
 * The client's side of EnqueueStream (see queue.proto): enqueue() calls go as
 * messages on one stream, opened on first use, instead of one unary call each.
 * A message on an open stream costs a fraction of a unary call on both sides
 * (issue #4, bench rows 2 and 5).
 *
 * How requests end:
 * - answered: with their ids, or their own status (as a unary call's error,
 *   with the reason: see errors.ts);
 * - the stream ends with OK (the server drained): what is unanswered was never
 *   read, so it is sent again on a new stream;
 * - the stream fails (the connection lost, say): what is unanswered fails with
 *   that status, as a unary call cut off would (the items may have been written);
 * - the server has no EnqueueStream (UNIMPLEMENTED: nothing was read): this and
 *   every later request goes by unary Enqueue;
 * - no answer within `timeoutMs`: DEADLINE_EXCEEDED, like a unary deadline.
 *
 * The stream is half-closed after `idleMs` without requests, so an idle client
 * holds no call open and a process that forgot close() still exits.
 */
import * as grpc from "@grpc/grpc-js";
import type { EnqueueStreamResponse } from "../gen/switchyard/v1/queue_pb.js";
import { PreEncoded } from "../grpc/adapter.js";
import { encodeEnqueueStreamRequest, type EnqueueRequestFields } from "../grpc/enqueue-wire.js";
import { serviceError } from "./errors.js";

type Duplex = grpc.ClientDuplexStream<PreEncoded, EnqueueStreamResponse>;

interface Pending {
  request: EnqueueRequestFields;
  sentMs: number;
  ok(ids: string[]): void;
  fail(err: grpc.ServiceError): void;
}

export class EnqueueStream {
  private stream?: Duplex;
  /** Unanswered requests of the open stream, by id, oldest first. */
  private pending = new Map<number, Pending>();
  private nextId = 1;
  private unsupported = false;
  private closed = false;
  /**
   * Armed while anything is unanswered, for the oldest request's deadline or
   * earlier (a request answered since is not disarmed for: when it fires, it
   * arms again for the oldest left). A serial caller arms none per request.
   */
  private deadlineTimer?: NodeJS.Timeout;
  /** Armed once nothing is unanswered; when it fires, the stream ends if idle since `idleSince` for `idleMs`, or it arms again. */
  private idleTimer?: NodeJS.Timeout;
  /** When the stream last had nothing unanswered (undefined while something is). */
  private idleSince?: number;

  constructor(
    /** Opens a new EnqueueStream call. */
    private readonly open: () => Duplex,
    /** Sends one unary Enqueue (the fallback). */
    private readonly unary: (request: EnqueueRequestFields) => Promise<string[]>,
    private readonly timeoutMs: number,
    private readonly idleMs = 1000,
  ) {}

  /** Runs one Enqueue request; resolves to its ids. */
  send(request: EnqueueRequestFields): Promise<string[]> {
    if (this.closed) return Promise.reject(serviceError(grpc.status.CANCELLED, "the client was closed"));
    if (this.unsupported) return this.unary(request);
    return new Promise((ok, fail) => this.write({ request, sentMs: Date.now(), ok, fail }));
  }

  /** Ends the stream; unanswered requests fail with CANCELLED. */
  close(): void {
    this.closed = true;
    clearTimeout(this.idleTimer);
    clearTimeout(this.deadlineTimer);
    this.stream?.cancel();
  }

  private write(p: Pending): void {
    const id = this.nextId;
    let bytes: Buffer;
    try {
      // Written here rather than by the serializer: grpc-js keeps what it is given until it is sent.
      bytes = encodeEnqueueStreamRequest(id, p.request);
    } catch (err) {
      p.fail(serviceError(grpc.status.INTERNAL, `Request message serialization failure: ${err instanceof Error ? err.message : String(err)}`));
      return;
    }
    this.nextId = this.nextId >= 0xffffffff ? 1 : this.nextId + 1;
    const stream = (this.stream ??= this.start());
    this.pending.set(id, p);
    this.idleSince = undefined;
    if (this.pending.size === 1) this.armDeadline();
    stream.write(new PreEncoded(bytes));
  }

  private start(): Duplex {
    const stream = this.open();
    stream.on("data", (res: EnqueueStreamResponse) => this.answered(stream, res));
    stream.on("error", () => undefined); // the status below says the same
    stream.on("status", (status: grpc.StatusObject) => this.ended(stream, status));
    return stream;
  }

  private answered(stream: Duplex, res: EnqueueStreamResponse): void {
    if (stream !== this.stream) return;
    const p = this.pending.get(res.id);
    if (!p) return; // timed out already
    this.pending.delete(res.id);
    if (res.code === grpc.status.OK) p.ok(res.ids);
    else p.fail(serviceError(res.code, res.message, res.reason));
    if (this.pending.size === 0) this.armIdle();
  }

  private ended(stream: Duplex, status: grpc.StatusObject): void {
    if (stream !== this.stream) return;
    this.stream = undefined;
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const unanswered = [...this.pending.values()];
    this.pending = new Map();
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
    if (status.code === grpc.status.UNIMPLEMENTED && !this.closed) {
      this.unsupported = true;
      for (const p of unanswered) this.unary(p.request).then(p.ok, p.fail);
    } else if (status.code === grpc.status.OK && !this.closed) {
      for (const p of unanswered) this.write(p);
    } else {
      const err = serviceError(status.code, status.details, undefined, status.metadata);
      for (const p of unanswered) p.fail(err);
    }
  }

  /** Fails requests older than the timeout when the oldest's time comes; armed unless it is already (see deadlineTimer). */
  private armDeadline(): void {
    const oldest = this.pending.values().next().value;
    if (this.deadlineTimer || !oldest || this.timeoutMs === Infinity) return;
    this.deadlineTimer = setTimeout(() => {
      this.deadlineTimer = undefined;
      const now = Date.now();
      let failed = false;
      for (const [id, p] of this.pending) {
        if (now - p.sentMs < this.timeoutMs) break;
        this.pending.delete(id);
        failed = true;
        p.fail(serviceError(grpc.status.DEADLINE_EXCEEDED, `no answer to Enqueue within ${this.timeoutMs} ms`));
      }
      if (this.pending.size > 0) this.armDeadline();
      else if (failed) this.armIdle();
    }, Math.max(0, oldest.sentMs + this.timeoutMs - Date.now()));
    this.deadlineTimer.unref();
  }

  /** Half-closes the stream after `idleMs` with nothing unanswered. */
  private armIdle(): void {
    this.idleSince = Date.now();
    if (!this.idleTimer) this.armIdleCheck(this.idleMs);
  }

  private armIdleCheck(ms: number): void {
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      if (this.idleSince === undefined || !this.stream) return; // busy again: its next idle arms anew
      const left = this.idleSince + this.idleMs - Date.now();
      if (left > 0) return this.armIdleCheck(left);
      // Nothing is unanswered, so its end needs no handling: the next request opens a new stream;
      // nor is any deadline left to watch (a dropped client holds no timer until an old one's time).
      clearTimeout(this.deadlineTimer);
      this.deadlineTimer = undefined;
      this.stream.end();
      this.stream = undefined;
    }, ms);
    this.idleTimer.unref();
  }
}
