/**
 * The TS client's enqueue coalescing (src/client/enqueue-batcher.ts): calls to
 * one queue in the same turn share one Enqueue request, each keeps its own ids,
 * and a call refused for its content fails alone. Real gRPC, real Redis.
 */
import { describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueList, QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient } from "../../src/client/client.js";
import { delta, scrape } from "../helpers/http.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard({ env: { SWITCHYARD_MAX_PAYLOAD_BYTES: "64" } });
// The client sends enqueue() calls as EnqueueStream messages: one message is one Enqueue request.
const enqueueRequests = { grpc_service: "switchyard.v1.QueueService", grpc_method: "EnqueueStream", grpc_type: "bidi_stream" };
const unaryEnqueues = { grpc_service: "switchyard.v1.QueueService", grpc_method: "Enqueue", grpc_type: "unary" };
const text = (b: Uint8Array) => Buffer.from(b).toString();

describe("enqueue coalescing in the TS client", () => {
  it("sends 100 single-item calls made in one turn as two requests (the first at once), each call with its own id, in call order", async () => {
    await t.sy.client.createQueue({ name: "{co}", mode: QueueMode.RELIABLE });
    const before = await scrape(t.sy.app.httpAddress);
    const ids = await Promise.all(Array.from({ length: 100 }, (_, i) => t.sy.client.enqueue("{co}", [`item ${i}`])));
    const after = await scrape(t.sy.app.httpAddress);
    expect(delta(before, after, "grpc_server_msg_received_total", enqueueRequests)).toBe(2);
    expect(delta(before, after, "grpc_server_started_total", unaryEnqueues)).toBe(0);
    expect(ids.every((x) => x.length === 1)).toBe(true);
    expect(new Set(ids.flat()).size).toBe(100);
    const peeked = await t.sy.client.peekQueue("{co}", QueueList.READY, 100);
    expect(peeked.items.map((i) => [i.id, text(i.payload)])).toEqual(ids.map((x, i) => [x[0], `item ${i}`]));
  });

  it("sends a serial caller's next call at once, and gathers the next calls of a merged call's callers", async () => {
    await t.sy.client.createQueue({ name: "{cs}", mode: QueueMode.RELIABLE });
    const client = t.sy.client;
    /** Requests the server received while `run` ran. */
    const requests = async (run: () => Promise<unknown>) => {
      const before = await scrape(t.sy.app.httpAddress);
      await run();
      return delta(before, await scrape(t.sy.app.httpAddress), "grpc_server_msg_received_total", enqueueRequests);
    };
    // In answer to a call of its own, "b" goes out at once: "c", queued for the turn's end before it, finds it sent.
    expect(await requests(async () => {
      await client.enqueue("{cs}", ["a"]);
      let c: Promise<unknown> | undefined;
      setImmediate(() => (c = client.enqueue("{cs}", ["c"])));
      await client.enqueue("{cs}", ["b"]);
      await expect.poll(() => c).toBeDefined();
      await c;
    })).toBe(3);
    // In answer to a merged call, its callers' next calls wait for the turn's end and go together.
    expect(await requests(async () => {
      const first = client.enqueue("{cs}", ["d0"]); // at once, alone
      await Promise.all([first, ...[1, 2, 3].map((i) => client.enqueue("{cs}", [`d${i}`]).then(() => client.enqueue("{cs}", [`e${i}`])))]);
    })).toBe(3);
    const peeked = await client.peekQueue("{cs}", QueueList.READY, 100);
    expect(peeked.items.map((i) => text(i.payload)).sort()).toEqual(["a", "b", "c", "d0", "d1", "d2", "d3", "e1", "e2", "e3"]);
  });

  it("fails only the call whose item is refused; the others land once", async () => {
    await t.sy.client.createQueue({ name: "{cf}", mode: QueueMode.RELIABLE });
    const calls = [
      t.sy.client.enqueue("{cf}", ["a"]),
      t.sy.client.enqueue("{cf}", ["x".repeat(65)]), // over SWITCHYARD_MAX_PAYLOAD_BYTES
      t.sy.client.enqueue("{cf}", ["b", "c"]),
    ];
    const outcomes = await Promise.allSettled(calls);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: "item 0 has a payload of 65 bytes; the limit is 64 (SWITCHYARD_MAX_PAYLOAD_BYTES)",
    });
    const peeked = await t.sy.client.peekQueue("{cf}", QueueList.READY, 10);
    expect(peeked.items.map((i) => text(i.payload)).sort()).toEqual(["a", "b", "c"]);
  });

  it("fails every call with the queue's own refusal, and sends nothing twice", async () => {
    const calls = [t.sy.client.enqueue("{missing}", ["a"]), t.sy.client.enqueue("{missing}", ["b"])];
    for (const o of await Promise.allSettled(calls)) expect(o).toMatchObject({ status: "rejected", reason: { code: grpc.status.NOT_FOUND } });
  });

  it("keeps calls with another ttl or to another queue apart, and is off with coalesceEnqueues: false", async () => {
    await t.sy.client.createQueue({ name: "{cx}", mode: QueueMode.SIMPLE });
    await t.sy.client.createQueue({ name: "{cy}", mode: QueueMode.SIMPLE });
    let before = await scrape(t.sy.app.httpAddress);
    // Per queue and ttl: the first call at once, the other two together.
    await Promise.all(
      [["{cx}", 0], ["{cx}", 60_000], ["{cy}", 0]].flatMap(([q, ttlMs]) =>
        ["1", "2", "3"].map((p) => t.sy.client.enqueue(q as string, [p], { ttlMs: ttlMs as number })),
      ),
    );
    expect(delta(before, await scrape(t.sy.app.httpAddress), "grpc_server_msg_received_total", enqueueRequests)).toBe(6);
    expect(await t.redis.plain.pttl("{cx}")).toBeGreaterThan(0);

    const plain = new SwitchyardClient(t.sy.address, { coalesceEnqueues: false });
    try {
      before = await scrape(t.sy.app.httpAddress);
      await Promise.all([plain.enqueue("{cy}", ["5"]), plain.enqueue("{cy}", ["6"]), plain.enqueue("{cy}", ["7"])]);
      expect(delta(before, await scrape(t.sy.app.httpAddress), "grpc_server_msg_received_total", enqueueRequests)).toBe(3);
    } finally {
      plain.close();
    }
  });
});
