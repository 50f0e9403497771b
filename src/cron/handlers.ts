/**
 * The handler registry (SPEC C9): names are unique, a second registration of
 * a name fails at start-up. Built-ins: HelloWorld, SendSms, LogClean.
 */
import type { Clock } from "../clock.js";
import type { Logger } from "../log.js";

/** What a handler gets besides its params. */
export interface RunContext {
  jobId: string;
  /** The execution lock's fencing number (0 without a lock): fence downstream writes with it. */
  fence: number;
  /** Aborted when the run must stop (timeout, shutdown). */
  signal: AbortSignal;
  clock: Clock;
  log: Logger;
}

/** A local job handler: the returned string becomes the log message. */
export type JobHandler = (ctx: RunContext, params: string) => Promise<string>;

export class HandlerRegistry {
  private readonly handlers = new Map<string, JobHandler>();

  /** Registers `handler` as `name`; throws when the name is taken. */
  register(name: string, handler: JobHandler): void {
    if (this.handlers.has(name)) throw new Error(`a job handler named "${name}" is already registered`);
    this.handlers.set(name, handler);
  }

  get(name: string): JobHandler | undefined {
    return this.handlers.get(name);
  }

  names(): string[] {
    return [...this.handlers.keys()].sort();
  }
}

/** One kind of log LogClean removes (job logs; the audit log joins later). */
export interface CleanableLog {
  readonly name: string;
  /** Removes entries older than `cutoffMs` in batches; returns how many. */
  clean(cutoffMs: number): Promise<number>;
}

const DAY_MS = 86_400_000;

/** Registers HelloWorld, SendSms and LogClean. */
export function registerBuiltins(registry: HandlerRegistry, logs: CleanableLog[], defaultRetentionDays: number): void {
  registry.register("HelloWorld", async (ctx) => {
    ctx.log.info("hello world", { job: ctx.jobId });
    return "hello world";
  });
  registry.register("SendSms", async (ctx, params) => {
    ctx.log.info("SendSms (no SMS gateway; parameters logged only)", { job: ctx.jobId, params });
    return `SendSms parameters logged: ${params || "(none)"}`;
  });
  registry.register("LogClean", async (ctx, params) => {
    let days = 0;
    if (params.trim()) {
      // Params are any JSON text (validated on create): `null` or a bare number name no retention either.
      const given = (JSON.parse(params) as { retentionDays?: unknown } | null)?.retentionDays;
      days = given === undefined || given === null ? 0 : Number(given);
      if (!Number.isFinite(days) || days < 0) {
        throw new Error(`retentionDays must be a number of days (0 or missing: ${defaultRetentionDays}), not ${JSON.stringify(given)}`);
      }
    }
    if (days <= 0) days = defaultRetentionDays > 0 ? defaultRetentionDays : 90;
    const cutoff = ctx.clock.now() - days * DAY_MS;
    const parts: string[] = [];
    for (const log of logs) parts.push(`${log.name}: ${await log.clean(cutoff)}`);
    return `removed entries older than ${days} days: ${parts.join(", ")}`;
  });
}
