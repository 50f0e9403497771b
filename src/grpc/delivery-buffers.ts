/**
 * Bytes of deliveries written to Lease calls that their connections have not
 * yet taken, per stream and over the instance (issue 17: a worker that never
 * reads made the server hold credit × payload, up to gigabytes).
 *
 * A message written to a call counts until grpc-js calls its write callback,
 * which it does once HTTP/2 flow control has let the bytes go to the socket:
 * a worker that stops reading stops its stream's window, and its bytes stay
 * counted. While a stream holds `perStream` bytes or more, or all streams
 * together hold `perInstance` and it holds any, the stream takes no more
 * deliveries (its LeaseSink says it is backlogged, so the dispatcher gives it
 * no credit); once its bytes drain it is resumed. One delivery message may
 * overshoot a limit: the check is before a message, not within it; and over
 * the instance's limit each stream with nothing waiting may still take one.
 */
import { ByteBudget } from "../queue/byte-budget.js";

/** One Lease stream's account. */
export interface StreamBuffer {
  /** True while the stream may take no more deliveries. */
  backlogged(): boolean;
  /** Counts `bytes` written to the call; returns the callback to call once they are flushed. */
  wrote(bytes: number): () => void;
  /** Gives back what the stream still holds (its call ended; pending callbacks may never come). */
  close(): void;
}

export class DeliveryBuffers {
  private readonly total: ByteBudget;
  /** Streams refused a delivery (by their own budget), and how to resume each once it may take one again. */
  private readonly waiting = new Map<ByteBudget, () => void>();

  constructor(
    private readonly perStream: number,
    perInstance: number,
  ) {
    this.total = new ByteBudget(perInstance);
  }

  /** Bytes held over every stream. */
  get bytes(): number {
    return this.total.used;
  }

  /** A new stream's account; `resume` is called when it may take deliveries again after being backlogged. */
  open(resume: () => void): StreamBuffer {
    const own = new ByteBudget(this.perStream);
    let closed = false;
    // Over the instance's limit, a stream with nothing waiting still takes a message at a
    // time: a worker that reads is not held up by those that do not.
    const full = () => own.full || (this.total.full && own.used > 0);
    return {
      backlogged: () => {
        if (closed || !full()) return false;
        this.waiting.set(own, resume);
        return true;
      },
      wrote: (bytes) => {
        own.add(bytes);
        this.total.add(bytes);
        let flushed = false;
        return () => {
          if (closed || flushed) return;
          flushed = true;
          own.give(bytes);
          this.total.give(bytes);
          if (this.waiting.has(own) && !full()) {
            this.waiting.delete(own);
            resume();
          }
          this.resumeWaiting();
        };
      },
      close: () => {
        if (closed) return;
        closed = true;
        this.waiting.delete(own);
        this.total.give(own.used);
        own.give(own.used);
        this.resumeWaiting();
      },
    };
  }

  /** Resumes the waiting streams under their own limit, while the instance is under its limit. */
  private resumeWaiting(): void {
    if (this.total.full) return;
    const ready: (() => void)[] = [];
    for (const [own, resume] of this.waiting) {
      if (own.full) continue;
      this.waiting.delete(own);
      ready.push(resume);
    }
    for (const resume of ready) resume();
  }
}
