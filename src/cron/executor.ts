/**
 * Runs a job's target (SPEC C7): an http(s) URL, a registered handler, or
 * `queue:<name>`. Any failure becomes a RunFailure whose message is logged.
 */
import type { Clock } from "../clock.js";
import type { Queues } from "../queue/queues.js";
import type { HandlerRegistry, RunContext } from "./handlers.js";
import type { JobRecord } from "./job.js";
import { callHttp, TooManyRedirects } from "./http-call.js";
import { RefusedDestination, type HttpGuard } from "./http-guard.js";

/** A run that failed; `message` goes to the job log's error. */
export class RunFailure extends Error {
  override readonly name = "RunFailure";
}

/** Executor settings. */
export interface ExecutorOptions {
  handlers: HandlerRegistry;
  queues: Queues;
  clock: Clock;
  /** HTTP target timeout (the seed's 30 s). */
  httpTimeoutMs: number;
  /** Refuses HTTP targets inside the network (SSRF), on every redirect too. */
  httpGuard: HttpGuard;
}

const BODY_CHARS = 1000;

/** The first `n` characters of `text`, counted as the seed counts them: code points (an emoji is one, not two UTF-16 units). */
function firstChars(text: string, n: number): string {
  let end = 0;
  for (let count = 0; count < n && end < text.length; count++) end += text.codePointAt(end)! > 0xffff ? 2 : 1;
  return text.slice(0, end);
}

async function callHttpTarget(job: JobRecord, ctx: RunContext, options: ExecutorOptions): Promise<string> {
  const abort = new AbortController();
  const timer = options.clock.setTimer(options.httpTimeoutMs, () =>
    abort.abort(new RunFailure(`HTTP request timed out after ${options.httpTimeoutMs / 1000} s`)),
  );
  const onStop = () => abort.abort(new RunFailure("run cancelled"));
  ctx.signal.addEventListener("abort", onStop, { once: true });
  try {
    const response = await callHttp(job.target, job.params, options.httpGuard, abort.signal);
    const body = firstChars(response.body, BODY_CHARS);
    if (response.status !== 200) throw new RunFailure(`HTTP ${response.status}: ${body}`);
    return `HTTP 200: ${body}`;
  } catch (err) {
    if (err instanceof RunFailure) throw err;
    if (abort.signal.aborted && abort.signal.reason instanceof RunFailure) throw abort.signal.reason;
    if (err instanceof RefusedDestination || err instanceof TooManyRedirects) throw new RunFailure(err.message);
    const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : "";
    throw new RunFailure(`HTTP request failed: ${err instanceof Error ? err.message : String(err)}${cause}`);
  } finally {
    timer.cancel();
    ctx.signal.removeEventListener("abort", onStop);
  }
}

/** Runs `job`'s target; resolves to the log message or rejects with a RunFailure. */
export async function runTarget(job: JobRecord, ctx: RunContext, tickMs: number, options: ExecutorOptions): Promise<string> {
  const { target } = job;
  if (/^https?:\/\//i.test(target)) return callHttpTarget(job, ctx, options);
  if (target.startsWith("queue:")) {
    const queue = target.slice("queue:".length);
    const headers: Record<string, string> = { "switchyard-job-id": job.id, "switchyard-fence": String(ctx.fence) };
    if (tickMs) headers["switchyard-tick-time"] = new Date(tickMs).toISOString();
    try {
      const [id] = await options.queues.enqueue(queue, [{ payload: Buffer.from(job.params), headers }]);
      return `enqueued item ${id} onto ${queue}`;
    } catch (err) {
      throw new RunFailure(`could not enqueue onto ${queue}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  const handler = options.handlers.get(target);
  if (!handler) throw new RunFailure(`no handler registered for "${target}"`);
  return handler(ctx, job.params);
}
