/** `switchyard queue declare|list|stats|enqueue|peek|peek-dead|requeue-dead|delete-dead|purge|pause|resume|group-create|group-move|group-delete`. */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import {
  type PeekedItem,
  PeekQueueResponseSchema,
  type Queue,
  QueueList,
  QueueMode,
  QueueSchema,
  QueueStatsSchema,
  type QueueStats,
} from "../gen/switchyard/v1/queue_pb.js";
import type { SwitchyardClient } from "../client/client.js";
import { UsageError, choice, durationArg, headersArg, intArg, list, need, parse, str } from "./args.js";
import type { Command } from "./command.js";
import { duration, enumName, fields, headersText, json, payloadText, pj, table, time } from "./format.js";

const mode = (q: Queue) => enumName(QueueMode, q.mode, "QUEUE_MODE_");

/** Every declared queue, through all pages (at most 100 pages of 1000). */
async function allQueues(client: SwitchyardClient): Promise<Queue[]> {
  const out: Queue[] = [];
  let token = "";
  for (let page = 0; page < 100; page++) {
    const res = await client.listQueues(1000, token);
    out.push(...res.queues);
    token = res.nextPageToken;
    if (!token) break;
  }
  return out;
}

const declare: Command = {
  usage:
    "queue declare NAME --mode simple|reliable|stream [--recovery-set KEY --min-idle 60s] [--recovery-ttl D] " +
    "[--max-deliveries N] [--processing-list KEY] [--dead-letter-list KEY] " +
    "[--group NAME[=START]]... [--max-len N | --max-age D]   (groups and trimming: stream queues)",
  options: {
    mode: { type: "string" },
    "processing-list": { type: "string" },
    "recovery-set": { type: "string" },
    "min-idle": { type: "string" },
    "recovery-ttl": { type: "string" },
    "max-deliveries": { type: "string" },
    "dead-letter-list": { type: "string" },
    group: { type: "string", multiple: true },
    "max-len": { type: "string" },
    "max-age": { type: "string" },
  },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [name] = need(positionals, ["NAME"]);
    const modeText = str(values, "mode");
    if (!modeText) throw new UsageError("--mode simple|reliable|stream is required");
    const m = choice("--mode", modeText, ["simple", "reliable", "stream"] as const);
    const ms = (flag: string) => {
      const text = str(values, flag);
      return text === undefined ? undefined : durationFromMs(durationArg(`--${flag}`, text));
    };
    const maxDeliveries = str(values, "max-deliveries");
    const maxLen = str(values, "max-len");
    const groups = list(values, "group").map((g) => {
      const at = g.indexOf("=");
      return at < 0 ? { name: g } : { name: g.slice(0, at), startId: g.slice(at + 1) };
    });
    const queue = await client.createQueue({
      name,
      mode: m === "simple" ? QueueMode.SIMPLE : m === "reliable" ? QueueMode.RELIABLE : QueueMode.STREAM,
      groups,
      streamTrim: maxLen !== undefined || values["max-age"] !== undefined
        ? { maxLen: BigInt(maxLen === undefined ? 0 : intArg("--max-len", maxLen)), maxAge: ms("max-age") }
        : undefined,
      processingList: str(values, "processing-list") ?? "",
      recoverySet: str(values, "recovery-set") ?? "",
      minIdle: ms("min-idle"),
      recoveryTtl: ms("recovery-ttl"),
      maxDeliveries: maxDeliveries === undefined ? 0 : intArg("--max-deliveries", maxDeliveries),
      deadLetterList: str(values, "dead-letter-list") ?? "",
    });
    if (globals.json) return io.out(json({ queue: pj(QueueSchema, queue) }));
    io.out(`declared queue ${queue.name}\n`);
    io.out(describeQueue(queue));
  },
};

function describeQueue(q: Queue): string {
  const pairs: [string, string][] = [
    ["name", q.name],
    ["mode", mode(q)],
  ];
  if (q.mode === QueueMode.RELIABLE) {
    pairs.push(
      ["processing list", q.processingList],
      ["dead-letter list", q.deadLetterList],
      ["max deliveries", String(q.maxDeliveries)],
      ["recovery set", q.recoverySet || "-"],
      ["min idle", duration(q.minIdle)],
    );
  }
  if (q.mode === QueueMode.STREAM) {
    pairs.push(
      ["groups", q.groups.map((g) => g.name).join(", ") || "-"],
      ["dead-letter list", q.deadLetterList],
      ["max deliveries", String(q.maxDeliveries)],
      ["min idle", duration(q.minIdle)],
      ["trim", q.streamTrim?.maxLen ? `max len ~${q.streamTrim.maxLen}` : q.streamTrim?.maxAge ? `max age ~${duration(q.streamTrim.maxAge)}` : "-"],
    );
  }
  pairs.push(["paused", q.paused ? "yes" : "no"], ["created", time(q.createTime)]);
  return fields(pairs);
}

const listQueues: Command = {
  usage: "queue list",
  options: {},
  async run({ argv, globals, connect, io }) {
    const client = connect();
    need(parse(argv, this.options).positionals, []);
    const queues = await allQueues(client);
    if (globals.json) return io.out(json({ queues: queues.map((q) => pj(QueueSchema, q)) }));
    const rows = queues.map((q) => [
      q.name,
      mode(q),
      q.mode !== QueueMode.SIMPLE ? String(q.maxDeliveries) : "-",
      q.recoverySet || "-",
      duration(q.minIdle),
      time(q.createTime),
    ]);
    io.out(table(["NAME", "MODE", "MAX-DELIVERIES", "RECOVERY-SET", "MIN-IDLE", "CREATED"], rows));
  },
};

const stats: Command = {
  usage: "queue stats [NAME...]   (all declared queues when no name is given)",
  options: {},
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { positionals } = parse(argv, this.options);
    const names = positionals.length ? positionals : (await allQueues(client)).map((q) => q.name);
    const all: QueueStats[] = [];
    for (const name of names) all.push(await client.getQueueStats(name));
    if (globals.json) return io.out(json({ stats: all.map((s) => pj(QueueStatsSchema, s)) }));
    const rows = all.map((s) => [
      s.queue,
      String(s.ready),
      String(s.processing),
      String(s.deadLetter),
      duration(s.oldestClaimAge),
      String(s.leaseStreams),
      String(s.delayed),
      s.paused ? "yes" : "no",
    ]);
    io.out(table(["QUEUE", "READY", "PROCESSING", "DEAD-LETTER", "OLDEST-CLAIM", "STREAMS", "DELAYED", "PAUSED"], rows));
    const groups = all.flatMap((s) => s.groups.map((g) => [
      s.queue, g.name, String(g.pending), g.lag < 0n ? "?" : String(g.lag), duration(g.oldestPendingIdle), String(g.consumers), g.lastDeliveredId,
    ]));
    if (groups.length > 0) io.out("\n" + table(["STREAM", "GROUP", "PENDING", "LAG", "OLDEST-PENDING-IDLE", "CONSUMERS", "LAST-DELIVERED"], groups));
  },
};

const groupCreate: Command = {
  usage: "queue group-create NAME GROUP [--start $|0|ID]   (stream queues; --start 0 replays the stream)",
  options: { start: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const { values, positionals } = parse(argv, this.options);
    const [name, group] = need(positionals, ["NAME", "GROUP"]);
    const queue = await connect().createConsumerGroup(name, group, str(values, "start") ?? "");
    if (globals.json) return io.out(json({ queue: pj(QueueSchema, queue) }));
    io.out(`created group ${group} of ${name}\n`);
  },
};

const groupMove: Command = {
  usage: "queue group-move NAME GROUP ID   (stream queues; entries after ID are delivered to the group again; 0: all, $: none)",
  options: {},
  async run({ argv, globals, connect, io }) {
    const [name, group, id] = need(parse(argv, this.options).positionals, ["NAME", "GROUP", "ID"]);
    await connect().setConsumerGroupPosition(name, group, id);
    if (globals.json) return io.out(json({ queue: name, group, id }));
    io.out(`moved group ${group} of ${name} to ${id}\n`);
  },
};

const groupDelete: Command = {
  usage: "queue group-delete NAME GROUP   (stream queues; its pending entries are forgotten)",
  options: {},
  async run({ argv, globals, connect, io }) {
    const [name, group] = need(parse(argv, this.options).positionals, ["NAME", "GROUP"]);
    const queue = await connect().deleteConsumerGroup(name, group);
    if (globals.json) return io.out(json({ queue: pj(QueueSchema, queue) }));
    io.out(`deleted group ${group} of ${name}\n`);
  },
};

const enqueue: Command = {
  usage: "queue enqueue NAME PAYLOAD... | - (one payload per line of stdin) [-H key=value]... [--ttl D] [--traceparent TP]",
  options: { header: { type: "string", short: "H", multiple: true }, ttl: { type: "string" }, traceparent: { type: "string" } },
  async run({ argv, globals, connect, io, stdinLines }) {
    const { values, positionals } = parse(argv, this.options);
    if (positionals.length < 2) throw new UsageError("give NAME and at least one PAYLOAD (or - to read payloads from stdin)");
    const [name, ...rest] = positionals;
    const payloads = rest.length === 1 && rest[0] === "-" ? await stdinLines() : rest;
    if (payloads.length === 0) throw new UsageError("no payloads on stdin");
    const headers = headersArg(list(values, "header"));
    const ttl = str(values, "ttl");
    const traceparent = str(values, "traceparent");
    // Sent as call metadata: the server puts it on every item without a traceparent header.
    const client = connect(traceparent ? { traceparent } : undefined);
    const ids = await client.enqueue(
      name,
      payloads.map((payload) => ({ payload, headers })),
      { ttlMs: ttl ? durationArg("--ttl", ttl) : undefined },
    );
    if (globals.json) return io.out(json({ queue: name, ids }));
    io.out(`enqueued ${ids.length} item${ids.length === 1 ? "" : "s"} onto ${name}\n`);
    io.out(ids.join("\n") + "\n");
  },
};

/** Why an item's last delivery failed, for a table ("-" when it has not). */
const lastErrorText = (i: PeekedItem) => (i.lastError ? payloadText(new TextEncoder().encode(i.lastError)) : "-");

const LISTS = { ready: QueueList.READY, delayed: QueueList.DELAYED, dead: QueueList.DEAD_LETTER } as const;

const peek: Command = {
  usage: "queue peek NAME [--list ready|delayed|dead] [--limit N]   (next to leave first; at most 100; with each item's last error)",
  options: { list: { type: "string" }, limit: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [name] = need(positionals, ["NAME"]);
    const which = choice("--list", str(values, "list") ?? "ready", ["ready", "delayed", "dead"] as const);
    const limit = str(values, "limit");
    const res = await client.peekQueue(name, LISTS[which], limit === undefined ? 0 : intArg("--limit", limit));
    if (globals.json) return io.out(json(pj(PeekQueueResponseSchema, res)));
    const noun = which === "dead" ? "dead letter" : `${which} item`;
    io.out(`${res.items.length} of ${res.total} ${noun}${res.total === 1n ? "" : "s"} in ${name}\n`);
    if (res.items.length === 0) return;
    const rows = res.items.map((i) => [
      i.id || "(raw)",
      time(i.enqueueTime),
      ...(which === "delayed" ? [time(i.notBefore)] : []),
      String(i.deliveryCount),
      lastErrorText(i),
      payloadText(i.payload),
    ]);
    io.out(table(["ID", "ENQUEUED", ...(which === "delayed" ? ["NOT-BEFORE"] : []), "DELIVERIES", "LAST-ERROR", "PAYLOAD"], rows));
  },
};

const peekDead: Command = {
  usage: "queue peek-dead NAME [--limit N]   (oldest first; at most 100)",
  options: { limit: { type: "string" } },
  async run({ argv, globals, connect, io }) {
    const client = connect();
    const { values, positionals } = parse(argv, this.options);
    const [name] = need(positionals, ["NAME"]);
    const limit = str(values, "limit");
    const res = await client.peekQueue(name, QueueList.DEAD_LETTER, limit === undefined ? 0 : intArg("--limit", limit));
    if (globals.json) return io.out(json(pj(PeekQueueResponseSchema, res)));
    io.out(`${res.items.length} of ${res.total} dead letter${res.total === 1n ? "" : "s"} in ${name}\n`);
    if (res.items.length === 0) return;
    const rows = res.items.map((i) => [i.id || "(raw)", time(i.enqueueTime), headersText(i.headers), lastErrorText(i), payloadText(i.payload)]);
    io.out(table(["ID", "ENQUEUED", "HEADERS", "LAST-ERROR", "PAYLOAD"], rows));
  },
};

/** `pause` and `resume`: deliveries of a queue stop or restart on every instance. */
function pauseCommand(verb: "pause" | "resume"): Command {
  return {
    usage: `queue ${verb} NAME   (${verb === "pause" ? "stops deliveries on every instance; enqueues still land" : "restarts deliveries"})`,
    options: {},
    async run({ argv, globals, connect, io }) {
      const client = connect();
      const [name] = need(parse(argv, this.options).positionals, ["NAME"]);
      const queue = verb === "pause" ? await client.pauseQueue(name) : await client.resumeQueue(name);
      if (globals.json) return io.out(json({ queue: pj(QueueSchema, queue) }));
      io.out(verb === "pause" ? `paused deliveries of ${name} (enqueues still land)\n` : `resumed deliveries of ${name}\n`);
    },
  };
}

/** `requeue-dead` and `delete-dead`: dead letters by id, or all of them. */
function deadLetterCommand(verb: "requeue" | "delete"): Command {
  return {
    usage: `queue ${verb}-dead NAME (ID... | --all)   (${verb === "requeue" ? "back onto the queue, fresh delivery count" : "gone for good"}; ids that begin with - go after --)`,
    options: { all: { type: "boolean" } },
    async run({ argv, globals, connect, io }) {
      const client = connect();
      const { values, positionals } = parse(argv, this.options);
      const [name, ...ids] = positionals;
      if (name === undefined) throw new UsageError("missing NAME");
      if (values.all === (ids.length > 0)) throw new UsageError(`name the dead letters' ids (see queue peek-dead), or give --all`);
      const which = values.all ? "all" : { ids };
      const n = verb === "requeue" ? await client.requeueDeadLetters(name, which) : await client.deleteDeadLetters(name, which);
      if (globals.json) return io.out(json({ queue: name, [verb === "requeue" ? "requeued" : "deleted"]: String(n) }));
      io.out(`${verb === "requeue" ? "requeued" : "deleted"} ${n} dead letter${n === 1 ? "" : "s"} of ${name}\n`);
    },
  };
}

const purge: Command = {
  usage: "queue purge NAME --yes   (deletes the waiting items; leased ones and dead letters stay)",
  options: { yes: { type: "boolean" } },
  async run({ argv, globals, connect, io }) {
    const { values, positionals } = parse(argv, this.options);
    const [name] = need(positionals, ["NAME"]);
    if (!values.yes) throw new UsageError(`purging deletes every item waiting in ${name}; add --yes to do it`);
    const n = await connect().purgeQueue(name);
    if (globals.json) return io.out(json({ queue: name, purged: String(n) }));
    io.out(`purged ${n} item${n === 1 ? "" : "s"} from ${name}\n`);
  },
};

/** The queue commands by name. */
export const queueCommands: Record<string, Command> = {
  declare,
  list: listQueues,
  stats,
  enqueue,
  peek,
  "peek-dead": peekDead,
  "requeue-dead": deadLetterCommand("requeue"),
  "delete-dead": deadLetterCommand("delete"),
  purge,
  pause: pauseCommand("pause"),
  resume: pauseCommand("resume"),
  "group-create": groupCreate,
  "group-move": groupMove,
  "group-delete": groupDelete,
};
