/**
 * The access table: for every Switchyard RPC, the scopes a request needs and,
 * for mutating calls, what the audit log records. A method missing here is
 * refused to every caller but one holding `*` (fail closed); a test checks
 * that every method of every service has a row.
 */
import type { SwitchyardError } from "../errors.js";
import type {
  AckRequest, CreateQueueRequest, DeleteQueueRequest, EnqueueStreamRequest, LeaseRequest, Queue, UpdateQueueRequest,
} from "../gen/switchyard/v1/queue_pb.js";
import { namedKeys } from "../queue/declaration.js";
import {
  JobStatus,
  type BatchDeleteJobsRequest,
  type CreateJobRequest,
  type CreateJobResponse,
  type RunOnceResponse,
  type SetJobStatusRequest,
  type UpdateJobRequest,
} from "../gen/switchyard/v1/cron_pb.js";
import type { Need, ScopeName } from "../auth/scopes.js";
import { parseToken } from "../queue/token.js";

/** What an audited call acted on. */
export interface AuditTarget {
  target: string;
  detail?: string;
}

/** One method's access rule. */
export interface AccessRule {
  /** Scopes the method needs whatever the request says (a malformed request needs these, for any queue). */
  readonly scopes: readonly ScopeName[];
  /** What one request message needs; by default `scopes`. */
  readonly needs?: (request: never) => Need[];
  /** For mutating calls: what the audit log records, from the request and (on success) the response. */
  readonly audit?: (request: never, response: never) => AuditTarget;
  /**
   * Streams that answer each message on its own: a refused message reaches the
   * handler as a {@link RefusedMessage} to answer, and the stream goes on.
   */
  readonly refusesInBand?: boolean;
}

/** A stream message the caller may not send, handed to a handler whose rule `refusesInBand`. */
export class RefusedMessage {
  constructor(
    readonly message: unknown,
    readonly error: SwitchyardError,
  ) {}
}

/** The queue a lease token names; undefined when the token is malformed (the handler refuses it). */
function tokenQueue(token: string): string | undefined {
  try {
    return parseToken(token).queue;
  } catch {
    return undefined;
  }
}

const byToken = (r: { leaseToken: string }): Need[] => [{ scope: "queue:lease", queue: tokenQueue(r.leaseToken) }];

/** One need per queue the tokens name (a batch of one queue's acks checks one scope). */
function byTokens(tokens: readonly string[]): Need[] {
  const queues = new Set(tokens.map(tokenQueue));
  return [...queues].map((queue) => ({ scope: "queue:lease", queue }));
}

function ackNeeds(r: Pick<AckRequest, "leaseToken" | "replies" | "replyQueue">): Need[] {
  const needs = byToken(r);
  // Replies are enqueued: the reply queue needs enqueue too (SPEC Q9).
  if (r.replies.length > 0) needs.push({ scope: "queue:enqueue", queue: r.replyQueue || undefined });
  return needs;
}

function leaseNeeds(r: LeaseRequest): Need[] {
  switch (r.kind.case) {
    case "open":
      return [{ scope: "queue:lease", queue: r.kind.value.queue }];
    case "ack":
      return ackNeeds(r.kind.value);
    case "retry":
    case "drop":
    case "extend":
      return byToken(r.kind.value);
    case "ackBatch":
      return byTokens(r.kind.value.leaseTokens);
    default:
      return [];
  }
}

const admin = (name: string): Need[] => [{ scope: "queue:admin", queue: name }];

/**
 * A declaration needs admin on its name and on every key it names outside its
 * own namespace (`<name>.…`), so a caller can point a queue only at keys it
 * administers (SPEC Q15); a standing reply route needs enqueue on its queue.
 */
function declarationNeeds(q: Queue | undefined): Need[] {
  if (!q) return admin("");
  const needs = [q.name, ...namedKeys(q)].map((k, i): Need => ({ scope: "queue:admin", queue: k, key: i > 0 }));
  if (q.replyQueue) needs.push({ scope: "queue:enqueue", queue: q.replyQueue });
  return needs;
}

function updateNeeds(r: UpdateQueueRequest): Need[] {
  const needs = admin(r.queue?.name ?? "");
  if (r.queue?.replyQueue && r.updateMask?.paths.includes("reply_queue")) needs.push({ scope: "queue:enqueue", queue: r.queue.replyQueue });
  return needs;
}
/**
 * A job whose target is `queue:<name>` enqueues onto that queue whenever it
 * runs: creating, changing or running it needs enqueue on that queue, as an
 * Enqueue would (issue 12, defect 2).
 */
export function jobTargetNeeds(target: string): Need[] {
  return target.startsWith("queue:") ? [{ scope: "queue:enqueue", queue: target.slice("queue:".length) }] : [];
}

const read = (name: string): Need[] => [{ scope: "queue:read", queue: name }];
const id = (r: { id: string }): AuditTarget => ({ target: r.id });
const name = (r: { name: string }): AuditTarget => ({ target: r.name });
const deadLetters = (r: { name: string; ids: string[]; all: boolean }): AuditTarget => ({
  target: r.name,
  detail: r.all ? "all" : `ids=${r.ids.join(",")}`,
});

const Q = "/switchyard.v1.QueueService/";
const C = "/switchyard.v1.CronService/";
const A = "/switchyard.v1.AuditService/";
const AU = "/switchyard.v1.AuthService/";

/** Access rules by method path ("/package.Service/Method"). */
export const accessRules: Readonly<Record<string, AccessRule>> = {
  [`${Q}CreateQueue`]: {
    scopes: ["queue:admin"],
    needs: (r: CreateQueueRequest) => declarationNeeds(r.queue),
    audit: (r: CreateQueueRequest) => ({ target: r.queue?.name ?? "" }),
  },
  [`${Q}GetQueue`]: { scopes: ["queue:read"], needs: (r: { name: string }) => read(r.name) },
  [`${Q}UpdateQueue`]: {
    scopes: ["queue:admin"],
    needs: updateNeeds,
    audit: (r: UpdateQueueRequest) => ({ target: r.queue?.name ?? "", detail: `fields=${r.updateMask?.paths.join(",") ?? ""}` }),
  },
  [`${Q}PauseQueue`]: { scopes: ["queue:admin"], needs: (r: { name: string }) => admin(r.name), audit: name },
  [`${Q}ResumeQueue`]: { scopes: ["queue:admin"], needs: (r: { name: string }) => admin(r.name), audit: name },

  // Listing shows every queue: only a reader of every queue may.
  [`${Q}ListQueues`]: { scopes: ["queue:read"], needs: () => read("*") },
  [`${Q}DeleteQueue`]: {
    scopes: ["queue:admin"],
    needs: (r: DeleteQueueRequest) => admin(r.name),
    audit: (r: DeleteQueueRequest) => ({ target: r.name, detail: r.purge ? "purge" : "" }),
  },
  [`${Q}GetQueueStats`]: { scopes: ["queue:read"], needs: (r: { name: string }) => read(r.name) },
  // Shows payloads and headers: a reader grant is for people trusted with them.
  [`${Q}PeekQueue`]: { scopes: ["queue:read"], needs: (r: { name: string }) => read(r.name) },
  [`${Q}PurgeQueue`]: { scopes: ["queue:admin"], needs: (r: { name: string }) => admin(r.name), audit: name },
  [`${Q}RequeueDeadLetters`]: { scopes: ["queue:admin"], needs: (r: { name: string }) => admin(r.name), audit: deadLetters },
  [`${Q}DeleteDeadLetters`]: { scopes: ["queue:admin"], needs: (r: { name: string }) => admin(r.name), audit: deadLetters },
  [`${Q}CreateConsumerGroup`]: {
    scopes: ["queue:admin"],
    needs: (r: { name: string }) => admin(r.name),
    audit: (r: { name: string; group?: { name: string; startId: string } }) => ({ target: r.name, detail: `group=${r.group?.name ?? ""} start=${r.group?.startId || "$"}` }),
  },
  [`${Q}SetConsumerGroupPosition`]: {
    scopes: ["queue:admin"],
    needs: (r: { name: string }) => admin(r.name),
    audit: (r: { name: string; group: string; id: string }) => ({ target: r.name, detail: `group=${r.group} id=${r.id}` }),
  },
  [`${Q}DeleteConsumerGroup`]: {
    scopes: ["queue:admin"],
    needs: (r: { name: string }) => admin(r.name),
    audit: (r: { name: string; group: string }) => ({ target: r.name, detail: `group=${r.group}` }),
  },
  [`${Q}Enqueue`]: { scopes: ["queue:enqueue"], needs: (r: { queue: string }) => [{ scope: "queue:enqueue", queue: r.queue }] },
  // A stream of Enqueue calls: every message is checked, and a refused one is answered on the stream.
  [`${Q}EnqueueStream`]: {
    scopes: ["queue:enqueue"],
    needs: (r: EnqueueStreamRequest) => [{ scope: "queue:enqueue", queue: r.request?.queue }],
    refusesInBand: true,
  },
  // A stream: every message is checked (open names the queue; settles name it by their token).
  [`${Q}Lease`]: { scopes: ["queue:lease"], needs: leaseNeeds },
  [`${Q}Ack`]: { scopes: ["queue:lease"], needs: ackNeeds },
  [`${Q}Retry`]: { scopes: ["queue:lease"], needs: byToken },
  [`${Q}Drop`]: { scopes: ["queue:lease"], needs: byToken },
  [`${Q}ExtendLease`]: { scopes: ["queue:lease"], needs: byToken },

  [`${C}CreateJob`]: {
    scopes: ["sys:job:add"],
    needs: (r: CreateJobRequest) => [{ scope: "sys:job:add" }, ...jobTargetNeeds(r.job?.target ?? "")],
    audit: (r: CreateJobRequest, res: CreateJobResponse | undefined) => ({ target: res?.job?.id ?? "", detail: `name=${r.job?.name ?? ""}` }),
  },
  [`${C}GetJob`]: { scopes: ["sys:job:list"] },
  [`${C}ListJobs`]: { scopes: ["sys:job:list"] },
  [`${C}ListJobLogs`]: { scopes: ["sys:job:list"] },
  // And enqueue on a queue target, new or stored: the handler checks the job as updated (jobTargetNeeds).
  [`${C}UpdateJob`]: {
    scopes: ["sys:job:update"],
    audit: (r: UpdateJobRequest) => ({ target: r.job?.id ?? "", detail: r.updateMask?.paths.length ? `fields=${r.updateMask.paths.join(",")}` : "" }),
  },
  // And, to RUNNING, enqueue on a queue target: the handler checks the stored job (jobTargetNeeds).
  [`${C}SetJobStatus`]: {
    scopes: ["sys:job:update"],
    audit: (r: SetJobStatusRequest) => ({ target: r.id, detail: `status=${JobStatus[r.status] ?? r.status}` }),
  },
  [`${C}DeleteJob`]: { scopes: ["sys:job:delete"], audit: id },
  [`${C}BatchDeleteJobs`]: { scopes: ["sys:job:delete"], audit: (r: BatchDeleteJobsRequest) => ({ target: r.ids.join(",") }) },
  [`${C}PauseJob`]: { scopes: ["sys:job:pause"], audit: id },
  // And enqueue on a queue target: the handler checks the stored job (jobTargetNeeds).
  [`${C}ResumeJob`]: { scopes: ["sys:job:resume"], audit: id },
  // And enqueue on a queue target: the handler checks the stored job (jobTargetNeeds).
  [`${C}RunOnce`]: {
    scopes: ["sys:job:execute"],
    audit: (r: { id: string }, res: RunOnceResponse | undefined) => ({ target: r.id, detail: res ? `run=${res.runId}` : "" }),
  },
  // Any authenticated caller.
  [`${C}GetSchedulerStatus`]: { scopes: [] },
  [`${C}PreviewSchedule`]: { scopes: [] },
  [`${AU}GetCaller`]: { scopes: [] },

  [`${A}ListAuditLogs`]: { scopes: ["sys:audit:list"] },
};

/** Methods anyone may call, without credentials: health checks and reflection. */
export function isOpenMethod(path: string): boolean {
  return (
    path.startsWith("/grpc.health.v1.Health/") ||
    path.startsWith("/grpc.reflection.v1.ServerReflection/") ||
    path.startsWith("/grpc.reflection.v1alpha.ServerReflection/")
  );
}
