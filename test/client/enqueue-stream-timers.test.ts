/**
 * The client's EnqueueStream timers (src/client/enqueue-stream.ts): a request
 * unanswered for `timeoutMs` fails with DEADLINE_EXCEEDED, measured from when
 * it was sent; the stream is half-closed once nothing has been unanswered for
 * `idleMs`, measured from the last answer. Neither timer is armed again for
 * every request: one armed for an earlier request arms itself again when it
 * fires early for the present one. Real server, real gRPC, real Redis; the
 * client's timers and Date are vitest's fake ones, so time passes only when
 * the test says.
 */
import { afterAll, afterEach, beforeAll, expect, it, vi } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueList, QueueMode, type EnqueueStreamResponse } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { EnqueueStream } from "../../src/client/enqueue-stream.js";
import type { PreEncoded } from "../../src/grpc/adapter.js";
import { startRedis, type TestRedis } from "../helpers/redis.js";
import { startSwitchyard, type TestSwitchyard } from "../helpers/switchyard.js";

const Q = "{timers}";
let redis: TestRedis;
let sy: TestSwitchyard;

beforeAll(async () => {
  redis = await startRedis();
  sy = await startSwitchyard(redis);
  await sy.client.createQueue({ name: Q, mode: QueueMode.SIMPLE });
});
afterAll(async () => {
  await sy?.stop();
  await redis?.stop();
});
afterEach(() => {
  vi.useRealTimers();
});

type Duplex = grpc.ClientDuplexStream<PreEncoded, EnqueueStreamResponse>;

/** An EnqueueStream on a connected client, and every call it opens with how each ended. */
async function enqueueStream(timeoutMs: number, idleMs: number) {
  const client = new SwitchyardClient(sy.address);
  await client.getQueue(Q); // connected before the timers are faked
  const opened: { call: Duplex; ends: number; status: Promise<grpc.StatusObject> }[] = [];
  const stream = new EnqueueStream(
    () => {
      const call = (client.grpc as unknown as { enqueueStream(): Duplex }).enqueueStream();
      const entry = { call, ends: 0, status: new Promise<grpc.StatusObject>((ok) => call.on("status", ok)) };
      const end = call.end.bind(call);
      call.end = ((...args: Parameters<Duplex["end"]>) => {
        entry.ends++;
        return end(...args);
      }) as Duplex["end"];
      opened.push(entry);
      return call;
    },
    () => Promise.reject(new Error("the unary fallback is not expected here")),
    timeoutMs,
    idleMs,
  );
  const send = (payload: string) => stream.send({ queue: Q, items: [{ payload: Buffer.from(payload), headers: {} }] } as never);
  return { client, stream, opened, send };
}

it("half-closes the stream idleMs after the last answer, not after the first, and opens a new one for the next request", async () => {
  const { client, stream, opened, send } = await enqueueStream(10_000, 1000);
  try {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    await send("a"); // idle from t = 0; the idle timer is armed for t = 1000
    await vi.advanceTimersByTimeAsync(600);
    await send("b"); // idle from t = 600
    await vi.advanceTimersByTimeAsync(500); // t = 1100: the timer fired, 500 ms short, and is armed again
    expect(opened.map((o) => o.ends)).toEqual([0]);
    await send("c"); // same stream; idle from t = 1100
    expect(opened).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(999); // t = 2099: 999 ms idle
    expect(opened[0].ends).toBe(0);
    await vi.advanceTimersByTimeAsync(1); // t = 2100: 1000 ms idle
    expect(opened[0].ends).toBe(1);
    // Nothing is left armed: a client dropped now without close() holds no timer (the server's share the fake clock, so look at the stream's own).
    const timers = stream as unknown as { deadlineTimer?: unknown; idleTimer?: unknown };
    expect([timers.deadlineTimer, timers.idleTimer]).toEqual([undefined, undefined]);
    vi.useRealTimers();
    expect((await opened[0].status).code).toBe(grpc.status.OK);
    // The next request opens a stream of its own; the items all landed, in order.
    await send("d");
    expect(opened).toHaveLength(2);
    const ready = await sy.client.peekQueue(Q, QueueList.READY, 10);
    expect(ready.items.map((i) => Buffer.from(i.payload).toString())).toEqual(["a", "b", "c", "d"]);
  } finally {
    stream.close();
    client.close();
    await sy.client.purgeQueue(Q);
  }
});

it("fails a request timeoutMs after it was sent, though a timer armed for an earlier request fires first", async () => {
  const { client, stream, opened, send } = await enqueueStream(1000, 60_000);
  const node = redis.nodeFor(Q);
  try {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    await send("first"); // answered; the deadline timer stays armed for t = 1000
    await vi.advanceTimersByTimeAsync(400);
    // Redis holds writes (for a minute of its own time: the test ends the pause): "held" gets no answer.
    await node.call("CLIENT", "PAUSE", "60000", "WRITE");
    const held = send("held"); // sent at t = 400: due to fail at t = 1400
    const outcome = held.then(
      () => "answered",
      (err: grpc.ServiceError) => `${err.code} ${err.details}`,
    );
    await vi.advanceTimersByTimeAsync(600); // t = 1000: the early timer fires and arms again
    await vi.advanceTimersByTimeAsync(399); // t = 1399
    expect(await Promise.race([outcome, Promise.resolve("pending")])).toBe("pending");
    await vi.advanceTimersByTimeAsync(1); // t = 1400
    expect(await outcome).toBe(`${grpc.status.DEADLINE_EXCEEDED} no answer to Enqueue within 1000 ms`);
    expect(opened).toHaveLength(1);
  } finally {
    await node.call("CLIENT", "UNPAUSE");
    vi.useRealTimers();
    stream.close();
    client.close();
    await sy.client.purgeQueue(Q);
  }
});
