/**
 * A worker that sends its open and a settle and half-closes at once, before the
 * open is answered (the open reads the declaration from Redis: a round trip):
 * it gets opened, then the settle's result, then the end (docs/worker-protocol.md:
 * settle results come after opened). Before, the result was lost once the open
 * took a round trip; in the review of that change, it came without opened.
 */
import { expect, it } from "vitest";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

it("answers open, then the settle sent with it, then ends, when the worker half-closes before opened", async () => {
  const Q = "{half-close}";
  await t.sy.client.createQueue({ name: Q, mode: QueueMode.RELIABLE });
  for (let i = 0; i < 5; i++) {
    const seen: string[] = [];
    const lease = t.sy.client.lease(Q, 1);
    void lease.opened.then(() => seen.push("opened"), () => seen.push("no opened"));
    lease.onSettleResult((r) => seen.push(`result ${r.code} ${r.reason}`));
    lease.extend("1@nobody");
    expect(await lease.close()).toBeUndefined();
    await lease.opened.catch(() => undefined);
    expect(seen).toEqual(["opened", "result 3 LEASE_TOKEN_INVALID"]);
  }
});
