/**
 * runWorker: leases from one queue and runs a handler per item, up to
 * `concurrency` at once. Success acks (with the handler's reply, if any); a
 * throw retries. A lost stream is reopened with backoff until `stop()`.
 */
import type { Delivery } from "../gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient, type LeaseSession, type Reply } from "./client.js";

/** What a handler may return: nothing, or reply items to enqueue with the ack. */
export type HandlerResult = void | { reply: Reply };

/** Options for {@link runWorker}. */
export interface WorkerOptions {
  /** A client, or the server's address. */
  client: SwitchyardClient | string;
  queue: string;
  /** STREAM queues: the consumer group to read as. */
  group?: string;
  /** Items processed at once (the stream's credit). */
  concurrency: number;
  handler: (delivery: Delivery) => Promise<HandlerResult> | HandlerResult;
  /** Told about handler failures and lost streams. */
  onError?: (err: unknown, delivery?: Delivery) => void;
}

/** A running worker. */
export interface Worker {
  /** Stops leasing, waits for running handlers, then closes the stream. */
  stop(): Promise<void>;
  /** Items handled so far (acked or retried). */
  readonly processed: number;
}

const isThenable = (x: unknown): x is PromiseLike<unknown> => typeof (x as PromiseLike<unknown> | undefined)?.then === "function";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts a worker; see {@link WorkerOptions}. */
export function runWorker(options: WorkerOptions): Worker {
  const ownClient = typeof options.client === "string";
  const client = typeof options.client === "string" ? new SwitchyardClient(options.client) : options.client;
  let stopping = false;
  let session: LeaseSession | undefined;
  let processed = 0;
  const running = new Set<Promise<void>>();

  const settle = (s: LeaseSession, d: Delivery, result: HandlerResult) => {
    s.ack(d.leaseToken, result ? result.reply : undefined);
    processed++;
  };
  const fail = (s: LeaseSession, d: Delivery, err: unknown) => {
    options.onError?.(err, d);
    s.retry(d.leaseToken);
    processed++;
  };
  // A handler that returns at once is settled at once: no promise per item.
  const handle = (s: LeaseSession, d: Delivery) => {
    let result: Promise<HandlerResult> | HandlerResult;
    try {
      result = options.handler(d);
    } catch (err) {
      fail(s, d, err);
      return;
    }
    if (!isThenable(result)) {
      settle(s, d, result);
      return;
    }
    const p = Promise.resolve(result).then((r) => settle(s, d, r), (err: unknown) => fail(s, d, err)).finally(() => running.delete(p));
    running.add(p);
  };

  const loop = async () => {
    for (let attempt = 0; !stopping; ) {
      const s = (session = client.lease(options.queue, options.concurrency, { group: options.group }));
      try {
        await s.opened;
        attempt = 0;
        for (let batch = await s.nextBatch(); batch.length > 0; batch = await s.nextBatch()) {
          for (const d of batch) handle(s, d);
        }
        const err = await s.ended;
        if (err && !stopping) options.onError?.(err);
      } catch (err) {
        if (!stopping) options.onError?.(err);
      }
      if (!stopping) await sleep(Math.min(100 * 2 ** attempt++, 5000));
    }
  };
  const done = loop();

  return {
    get processed() {
      return processed;
    },
    async stop() {
      stopping = true;
      session?.setCredit(0);
      await Promise.all(running);
      // Let the settles written above reach the server before the stream ends.
      await new Promise((r) => setImmediate(r));
      await session?.close();
      await done;
      if (ownClient) client.close();
    },
  };
}
