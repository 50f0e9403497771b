/**
 * A plain grpc-js echo, server and client in separate processes: what one
 * gRPC hop costs with nothing behind it, the floor under serial enqueue (a
 * Switchyard enqueue crosses this hop and then Redis; a BullMQ add crosses
 * Redis only). Messages are raw bytes, no protobuf: the service is defined
 * by hand with identity serializers.
 *
 * With a Redis socket it also has EchoPush, the floor under a serial enqueue
 * measured as a chain rather than added up: each message is LPUSHed (plain
 * ioredis) onto a list before it is answered, the hop and Redis with nothing
 * of Switchyard's between them.
 *
 * The same server is also a relay, the floor under the latency rows: a
 * producer's messages on one stream (each answered, as Enqueue is) go on to
 * the workers' streams (each acked, as a delivery is), across the same three
 * processes as Switchyard's producer, server and worker, with no Redis; or,
 * on PublishPush, each LPUSHed (plain ioredis) before it goes on and is
 * answered: the same shape with the Redis round trip an item must make
 * before it is delivered, and nothing of Switchyard's.
 */
import * as grpc from "@grpc/grpc-js";
import { Redis } from "ioredis";
import { monoUs } from "./lib.js";

const same = (b: Buffer) => b;
/** A method of the hand-made service: unary, or a bidi stream both ways. */
const method = (name: string, streaming: boolean) => ({
  path: `/bench.Echo/${name}`,
  requestStream: streaming,
  responseStream: streaming,
  requestSerialize: same,
  requestDeserialize: same,
  responseSerialize: same,
  responseDeserialize: same,
});
const definition: grpc.ServiceDefinition = {
  echo: method("Echo", false),
  echoStream: method("EchoStream", true),
  echoPush: method("EchoPush", true),
  publish: method("Publish", true),
  publishPush: method("PublishPush", true),
  subscribe: method("Subscribe", true),
};

/** An answer or an ack: a few bytes, as Switchyard's are. */
const OK = Buffer.from("ok");

/** The channel and server options Switchyard's own client and server use that bear on speed. */
const options = { "grpc.enable_channelz": 0 };

/** An echo round trip: a unary call, a message on a stream, or a message on a stream that pushes it onto Redis. */
export type EchoKind = "unary" | "stream" | "push";

/** The list EchoPush and PublishPush push onto (the bench deletes it after each run). */
export const PUSHED = "bench:echo-pushed";

/** Starts an echo server on a free loopback port; with `redisPath`, EchoPush pushes onto that Redis. */
export async function serveEcho(redisPath?: string): Promise<{ address: string; close(): Promise<void> }> {
  const server = new grpc.Server(options);
  const redis = redisPath ? new Redis({ path: redisPath }) : undefined;
  const subscribers: grpc.ServerDuplexStream<Buffer, Buffer>[] = [];
  let next = 0;
  /** Hands a producer's message to the next subscriber in turn (dropped when none: the bench subscribes first), then answers it. */
  const relay = (b: Buffer, producer: grpc.ServerDuplexStream<Buffer, Buffer>) => {
    if (subscribers.length > 0) subscribers[next++ % subscribers.length].write(b);
    producer.write(OK);
  };
  /** Each message of `call` LPUSHed onto Redis, then `then(message)`; the first failed LPUSH ends the call. */
  const pushing = (call: grpc.ServerDuplexStream<Buffer, Buffer>, then: (b: Buffer) => void) => {
    if (!redis) return call.emit("error", { code: grpc.status.FAILED_PRECONDITION, details: "the echo server was started without Redis" });
    let failed = false;
    call.on("data", (b: Buffer) => {
      redis.lpush(PUSHED, b).then(
        () => {
          if (!failed) then(b);
        },
        (err: Error) => {
          if (failed) return;
          failed = true;
          call.emit("error", { code: grpc.status.UNAVAILABLE, details: err.message });
        },
      );
    });
    call.on("end", () => call.end());
  };
  server.addService(definition, {
    publish: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on("data", (b: Buffer) => relay(b, call));
      call.on("end", () => call.end());
    },
    publishPush: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => pushing(call, (b) => relay(b, call)),
    subscribe: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      subscribers.push(call);
      call.on("data", () => undefined); // acks
      call.on("end", () => {
        subscribers.splice(subscribers.indexOf(call), 1);
        call.end();
      });
    },
    echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
    echoStream: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on("data", (b: Buffer) => call.write(b));
      call.on("end", () => call.end());
    },
    echoPush: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => pushing(call, () => call.write(OK)),
  });
  const port = await new Promise<number>((ok, fail) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? fail(err) : ok(p))),
  );
  return {
    address: `127.0.0.1:${port}`,
    close: async () => {
      await new Promise<void>((ok) => server.tryShutdown(() => ok()));
      redis?.disconnect();
    },
  };
}

interface EchoClient {
  echo(req: Buffer, cb: (err: grpc.ServiceError | null, res: Buffer) => void): void;
  echoStream(): grpc.ClientDuplexStream<Buffer, Buffer>;
  echoPush(): grpc.ClientDuplexStream<Buffer, Buffer>;
  publish(): grpc.ClientDuplexStream<Buffer, Buffer>;
  publishPush(): grpc.ClientDuplexStream<Buffer, Buffer>;
  subscribe(): grpc.ClientDuplexStream<Buffer, Buffer>;
  close(): void;
  waitForReady(deadline: number, cb: (err?: Error) => void): void;
}

async function connectEcho(address: string): Promise<EchoClient> {
  const Client = grpc.makeGenericClientConstructor(definition, "Echo");
  const client = new Client(address, grpc.credentials.createInsecure(), options) as unknown as EchoClient;
  await new Promise<void>((ok, fail) => client.waitForReady(Date.now() + 10_000, (err) => (err ? fail(err) : ok())));
  return client;
}

/** A producer or a worker of the relay. */
export interface RelayClient {
  /** Sends one message (with `push`, on the stream that LPUSHes it first); resolves once the relay has answered it. */
  publish(message: Buffer, push?: boolean): Promise<void>;
  /** Receives every message the relay hands this client, acking each; until unsubscribe(). */
  subscribe(onMessage: (message: Buffer) => void): void;
  unsubscribe(): Promise<void>;
  close(): void;
}

export async function connectRelay(address: string): Promise<RelayClient> {
  const client = await connectEcho(address);
  /** The publishing streams, plain and pushing, each with its unanswered messages in order; a stream that fails fails them and is dropped. */
  type Answer = { ok(): void; fail(err: Error): void };
  const publishing = new Map<boolean, { stream: grpc.ClientDuplexStream<Buffer, Buffer>; answers: Answer[] }>();
  let subscription: grpc.ClientDuplexStream<Buffer, Buffer> | undefined;
  return {
    publish(message, push = false) {
      let p = publishing.get(push);
      if (!p) {
        const answers: Answer[] = [];
        const stream = push ? client.publishPush() : client.publish();
        stream.on("data", () => answers.shift()?.ok());
        stream.on("error", (err: Error) => {
          publishing.delete(push);
          for (const a of answers.splice(0)) a.fail(err);
        });
        publishing.set(push, (p = { stream, answers }));
      }
      const { stream, answers } = p;
      return new Promise<void>((ok, fail) => {
        answers.push({ ok, fail });
        stream.write(message);
      });
    },
    subscribe(onMessage) {
      const stream = (subscription = client.subscribe());
      stream.on("data", (b: Buffer) => {
        onMessage(b);
        stream.write(OK);
      });
    },
    async unsubscribe() {
      const stream = subscription;
      subscription = undefined;
      if (!stream) return;
      await new Promise<void>((ok) => {
        stream.on("end", ok);
        stream.on("error", () => ok());
        stream.end();
      });
    },
    close() {
      for (const p of publishing.values()) p.stream.end();
      client.close();
    },
  };
}

/**
 * Makes `calls` echo round trips of `bytes` one after the other (await each): unary calls, messages on
 * one stream, or messages on one EchoPush stream (each pushed onto Redis before it is answered);
 * resolves to calls per second.
 */
export async function callEcho(address: string, kind: EchoKind, calls: number, bytes: number): Promise<number> {
  const client = await connectEcho(address);
  const payload = Buffer.alloc(bytes, 0x78);
  try {
    if (kind === "unary") {
      const one = () => new Promise<Buffer>((ok, fail) => client.echo(payload, (err, res) => (err ? fail(err) : ok(res))));
      for (let i = 0; i < 200; i++) await one(); // warm-up
      const t0 = monoUs();
      for (let i = 0; i < calls; i++) await one();
      return (calls / (monoUs() - t0)) * 1e6;
    }
    const stream = kind === "push" ? client.echoPush() : client.echoStream();
    let answer: (() => void) | undefined;
    stream.on("data", () => answer?.());
    const one = () => new Promise<void>((ok) => ((answer = ok), stream.write(payload)));
    for (let i = 0; i < 200; i++) await one();
    const t0 = monoUs();
    for (let i = 0; i < calls; i++) await one();
    const rate = (calls / (monoUs() - t0)) * 1e6;
    stream.end();
    return rate;
  } finally {
    client.close();
  }
}
