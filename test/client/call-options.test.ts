/** Per-call deadlines and AbortSignals on the TS client's unary calls (issue 14). */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
const Q = "{calls}";
let proxy: TcpProxy;
let client: SwitchyardClient;

beforeAll(async () => {
  await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  proxy = await startProxy(t.sy.address);
  // The client's own deadline is long: only a call's own can end it within the test.
  client = new SwitchyardClient(proxy.address, { timeoutMs: 60_000 });
  await client.getQueue(Q); // connected before the link goes dark
});
afterAll(async () => {
  client.close();
  await proxy.close();
});

const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: grpc.ServiceError) => e);

describe("unary calls", () => {
  it("refuse a deadline grpc-js cannot keep, before sending; Infinity means none", async () => {
    // grpc-js threw on these outside the call (an unhandled rejection): NaN failed the call, 1e15 left it pending forever.
    for (const timeoutMs of [NaN, -1, 1e15]) {
      const err = await failure(client.getQueue(Q, { timeoutMs }));
      expect([err?.name, err?.message]).toEqual(["RangeError", expect.stringContaining(`getQueue's timeoutMs is ${timeoutMs}`)]);
    }
    expect((await client.getQueue(Q, { timeoutMs: Infinity })).name).toBe(Q);
    expect(() => new SwitchyardClient(proxy.address, { timeoutMs: NaN })).toThrow(/ClientOptions.timeoutMs is NaN/);
  });

  it("end at their own deadline with DEADLINE_EXCEEDED when no answer comes", async () => {
    proxy.blackhole();
    try {
      const started = Date.now();
      const [get, enqueue] = await Promise.all([
        failure(client.getQueue(Q, { timeoutMs: 200 })),
        failure(client.enqueue(Q, [{ payload: "x", idempotencyKey: "k-deadline" }], { timeoutMs: 300 })),
      ]);
      expect([get?.code, enqueue?.code]).toEqual([grpc.status.DEADLINE_EXCEEDED, grpc.status.DEADLINE_EXCEEDED]);
      // Far from the client's 60 s.
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      proxy.restore();
    }
    // The timed-out Enqueue was held, not lost: it may land now. Sent again with its key, it lands once.
    const [id] = await client.enqueue(Q, [{ payload: "x", idempotencyKey: "k-deadline" }], { timeoutMs: 10_000 });
    expect(await t.sy.client.peekQueue(Q)).toMatchObject({ total: 1n, items: [{ id }] });
  });

  it("end with CANCELLED when their signal aborts, and send nothing when it aborted before", async () => {
    proxy.blackhole();
    const controller = new AbortController();
    let stats: Promise<grpc.ServiceError | undefined>;
    try {
      stats = failure(client.getQueueStats(Q, { signal: controller.signal }));
      controller.abort(new Error("the user went away"));
      expect((await stats)?.code).toBe(grpc.status.CANCELLED);
    } finally {
      proxy.restore();
    }
    const before = await failure(client.enqueue(Q, ["never sent"], { signal: controller.signal }));
    expect([before?.code, before?.details]).toEqual([grpc.status.CANCELLED, "enqueue not sent: its signal had aborted"]);
    const queued = await t.redis.plain.llen(Q);
    // A signal that never aborts changes nothing, and is let go of once the call ends.
    const idle = new AbortController();
    const [id] = await client.enqueue(Q, ["sent"], { signal: idle.signal, timeoutMs: 10_000 });
    expect(id).toMatch(/./);
    expect(await t.redis.plain.llen(Q)).toBe(queued + 1);
    const payloads = (await t.sy.client.peekQueue(Q, undefined, 100)).items.map((i) => Buffer.from(i.payload).toString());
    expect(payloads).toContain("sent");
    expect(payloads).not.toContain("never sent");
  });
});
