/**
 * Idempotent enqueue through a link that loses the answer (issue 14): a TCP
 * proxy (test/helpers/proxy.ts, not HTTP/2-aware) carries the Enqueue to the
 * server, holds the answer until the item is in Redis, then resets the
 * connection. The client sees UNAVAILABLE with the item written; sending the
 * same Enqueue again, with the same idempotency key, adds nothing and answers
 * the first id, as a mesh's retry (deploy/istio.yaml) would.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as grpc from "@grpc/grpc-js";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { SwitchyardClient, type ClientOptions } from "../../src/client/client.js";
import { startProxy, type TcpProxy } from "../helpers/proxy.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();
let proxy: TcpProxy;
beforeAll(async () => {
  proxy = await startProxy(t.sy.address);
});
afterAll(async () => {
  await proxy.close();
});

const ways: [string, ClientOptions][] = [
  ["a unary Enqueue", { enqueueStream: false, coalesceEnqueues: false }],
  ["an EnqueueStream message (the client's default)", {}],
];

describe("the same Enqueue sent twice through a proxy that drops the first answer", () => {
  it.each(ways)("as %s: the first fails UNAVAILABLE with the item written; the second answers its id and adds nothing", async (_way, options) => {
    const Q = `{once-${options.enqueueStream === false ? "unary" : "stream"}}`;
    await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
    const client = new SwitchyardClient(proxy.address, options);
    try {
      await client.getQueue(Q); // the connection is up before its answers are held
      proxy.holdReplies();
      const item = { payload: "charge order 1042", idempotencyKey: "order-1042" };
      const first = client.enqueue(Q, [item]).then(() => undefined, (e: grpc.ServiceError) => e);
      // The request reached the server and the item is written; its answer is held in the proxy.
      await expect.poll(async () => (await t.sy.client.getQueueStats(Q)).ready).toBe(1n);
      const [landed] = (await t.sy.client.peekQueue(Q)).items;
      expect(proxy.cut()).toBeGreaterThan(0);
      expect((await first)?.code).toBe(grpc.status.UNAVAILABLE);

      const [again] = await client.enqueue(Q, [item]);
      expect(again).toBe(landed.id);
      expect(await t.sy.client.peekQueue(Q)).toMatchObject({ total: 1n, items: [{ id: landed.id }] });
      // And it is delivered once.
      const lease = t.sy.client.lease(Q, 2);
      const [d] = await lease.take(1);
      expect([d.id, Buffer.from(d.payload).toString()]).toEqual([landed.id, "charge order 1042"]);
      await t.sy.client.ack(d.leaseToken);
      await lease.close();
      expect(await t.sy.client.getQueueStats(Q)).toMatchObject({ ready: 0n, processing: 0n });
    } finally {
      proxy.restore();
      client.close();
    }
  });
});
