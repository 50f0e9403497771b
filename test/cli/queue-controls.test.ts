/**
 * `switchyard queue pause|resume|peek` (issue 14), run in-process (run() is
 * what dist/cli/main.js calls) against a real server: pause and resume change
 * what stats and the server say; peek shows each retried item's and dead
 * letter's last error.
 */
import { describe, expect, it } from "vitest";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { QueueMode } from "../../src/gen/switchyard/v1/queue_pb.js";
import { run } from "../../src/cli/run.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const t = useSwitchyard();

/** Runs one command line against the test instance; resolves to its exit status and output. */
async function cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await run(args, { SWITCHYARD_ADDRESS: t.sy.address }, { out: (s) => (out += s), err: (s) => (err += s) }, async () => []);
  return { code, out, err };
}

const rows = (table: string) => table.trimEnd().split("\n").map((l) => l.split(/\s{2,}/));

describe("switchyard queue pause / resume", () => {
  it("stops and restarts deliveries, shown by stats and the declaration", async () => {
    const q = "{cli-pause}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    expect(await cli(["queue", "pause", q])).toEqual({ code: 0, out: `paused deliveries of ${q} (enqueues still land)\n`, err: "" });
    expect((await t.sy.client.getQueue(q)).paused).toBe(true);
    const stats = rows((await cli(["queue", "stats", q])).out);
    expect(stats[0].slice(-2)).toEqual(["DELAYED", "PAUSED"]);
    expect(stats[1].slice(-1)).toEqual(["yes"]);
    const resumed = JSON.parse((await cli(["queue", "resume", q, "--json"])).out);
    expect(resumed.queue).toMatchObject({ name: q, paused: false });
    expect((await t.sy.client.getQueue(q)).paused).toBe(false);
  });

  it("names a missing queue and a missing NAME precisely", async () => {
    const missing = await cli(["queue", "pause", "{nope}"]);
    expect([missing.code, missing.err]).toEqual([1, expect.stringMatching(/^switchyard: NOT_FOUND: .*\{nope\}/)]);
    const usage = await cli(["queue", "resume"]);
    expect([usage.code, usage.err]).toEqual([2, expect.stringContaining("missing NAME")]);
  });
});

describe("switchyard queue peek", () => {
  it("shows a retried item's delivery count and last error, and a dead letter's last reason", async () => {
    const q = "{cli-peek}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE, maxDeliveries: 2, retryPolicy: { initialBackoff: durationFromMs(0) } });
    const [id] = await t.sy.client.enqueue(q, ["resize cat.png"]);
    const lease = t.sy.client.lease(q, 1);
    const [first] = await lease.take(1);
    lease.setCredit(0);
    await t.sy.client.retry(first.leaseToken, { reason: "disk full", delayMs: 0 });

    const ready = (await cli(["queue", "peek", q])).out.split("\n");
    expect(ready[0]).toBe(`1 of 1 ready item in ${q}`);
    expect(rows(ready.slice(1).join("\n"))).toEqual([
      ["ID", "ENQUEUED", "DELIVERIES", "LAST-ERROR", "PAYLOAD"],
      [id, expect.stringMatching(/^\d{4}-/), "1", "disk full", "resize cat.png"],
    ]);

    lease.setCredit(1);
    const [second] = await lease.take(1);
    expect(second.lastError).toBe("disk full");
    await t.sy.client.retry(second.leaseToken, { reason: "disk still full" });
    await lease.close();

    const dead = (await cli(["queue", "peek", q, "--list", "dead"])).out.split("\n");
    expect(dead[0]).toBe(`1 of 1 dead letter in ${q}`);
    expect(rows(dead.slice(1).join("\n"))[1]).toEqual([id, expect.stringMatching(/^\d{4}-/), "2", "disk still full", "resize cat.png"]);
    const peekDead = rows((await cli(["queue", "peek-dead", q])).out.split("\n").slice(1).join("\n"));
    expect(peekDead).toEqual([
      ["ID", "ENQUEUED", "HEADERS", "LAST-ERROR", "PAYLOAD"],
      [id, expect.stringMatching(/^\d{4}-/), "-", "disk still full", "resize cat.png"],
    ]);
    const json = JSON.parse((await cli(["queue", "peek", q, "--list", "dead", "--json"])).out);
    expect(json.items[0]).toMatchObject({ id, deliveryCount: 2, lastError: "disk still full" });
  });

  it("shows when delayed items become ready, and refuses an unknown list", async () => {
    const q = "{cli-delayed}";
    await t.sy.client.createQueue({ name: q, mode: QueueMode.RELIABLE });
    const [id] = await t.sy.client.enqueue(q, [{ payload: "later", delayMs: 60_000 }]);
    const out = (await cli(["queue", "peek", q, "--list", "delayed"])).out.split("\n");
    expect(rows(out.slice(1).join("\n"))).toEqual([
      ["ID", "ENQUEUED", "NOT-BEFORE", "DELIVERIES", "LAST-ERROR", "PAYLOAD"],
      [id, expect.stringMatching(/^\d{4}-/), new Date(t.sy.clock.now() + 60_000).toISOString(), "0", "-", "later"],
    ]);
    const bad = await cli(["queue", "peek", q, "--list", "processing"]);
    expect([bad.code, bad.err]).toEqual([2, expect.stringContaining("--list")]);
  });
});
