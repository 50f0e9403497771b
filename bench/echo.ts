/**
 * A plain grpc-js echo, server and client in separate processes: what one
 * gRPC hop costs with nothing behind it, the floor under serial enqueue (a
 * Switchyard enqueue crosses this hop and then Redis; a BullMQ add crosses
 * Redis only). Messages are raw bytes, no protobuf: the service is defined
 * by hand with identity serializers.
 */
import * as grpc from "@grpc/grpc-js";
import { monoUs } from "./lib.js";

const same = (b: Buffer) => b;
const definition: grpc.ServiceDefinition = {
  echo: {
    path: "/bench.Echo/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: same,
    requestDeserialize: same,
    responseSerialize: same,
    responseDeserialize: same,
  },
  echoStream: {
    path: "/bench.Echo/EchoStream",
    requestStream: true,
    responseStream: true,
    requestSerialize: same,
    requestDeserialize: same,
    responseSerialize: same,
    responseDeserialize: same,
  },
};

/** The channel and server options Switchyard's own client and server use that bear on speed. */
const options = { "grpc.enable_channelz": 0 };

/** Starts an echo server on a free loopback port. */
export async function serveEcho(): Promise<{ address: string; close(): Promise<void> }> {
  const server = new grpc.Server(options);
  server.addService(definition, {
    echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
    echoStream: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
      call.on("data", (b: Buffer) => call.write(b));
      call.on("end", () => call.end());
    },
  });
  const port = await new Promise<number>((ok, fail) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? fail(err) : ok(p))),
  );
  return { address: `127.0.0.1:${port}`, close: () => new Promise((ok) => server.tryShutdown(() => ok())) };
}

/** Makes `calls` echo round trips of `bytes` one after the other (await each); resolves to calls per second. */
export async function callEcho(address: string, kind: "unary" | "stream", calls: number, bytes: number): Promise<number> {
  const Client = grpc.makeGenericClientConstructor(definition, "Echo");
  const client = new Client(address, grpc.credentials.createInsecure(), options) as unknown as {
    echo(req: Buffer, cb: (err: grpc.ServiceError | null, res: Buffer) => void): void;
    echoStream(): grpc.ClientDuplexStream<Buffer, Buffer>;
    close(): void;
    waitForReady(deadline: number, cb: (err?: Error) => void): void;
  };
  await new Promise<void>((ok, fail) => client.waitForReady(Date.now() + 10_000, (err) => (err ? fail(err) : ok())));
  const payload = Buffer.alloc(bytes, 0x78);
  try {
    if (kind === "unary") {
      const one = () => new Promise<Buffer>((ok, fail) => client.echo(payload, (err, res) => (err ? fail(err) : ok(res))));
      for (let i = 0; i < 200; i++) await one(); // warm-up
      const t0 = monoUs();
      for (let i = 0; i < calls; i++) await one();
      return (calls / (monoUs() - t0)) * 1e6;
    }
    const stream = client.echoStream();
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
