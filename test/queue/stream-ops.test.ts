/**
 * STREAM queues (issue 16), operations: per-group stats in GetQueueStats, the
 * group gauges on /metrics, and the CLI (declare, stats, group-create/move/delete).
 * The CLI runs from dist/ (npm test builds).
 */
import { execFile } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { key, scrape } from "../helpers/http.js";
import { useSwitchyard } from "../helpers/switchyard.js";

const CLI = join(resolve(dirname(fileURLToPath(import.meta.url)), "../.."), "dist/cli/main.js");
const t = useSwitchyard();

/** Runs `switchyard ...args` against the test instance; resolves to stdout, rejects with stderr. */
function cli(args: string[]): Promise<string> {
  return new Promise((ok, fail) => {
    execFile(process.execPath, [CLI, ...args], { env: { ...process.env, SWITCHYARD_ADDRESS: t.sy.address }, timeout: 20_000 }, (err, stdout, stderr) =>
      err ? fail(new Error(`switchyard ${args.join(" ")}: ${stderr}${stdout}`)) : ok(stdout),
    );
  });
}

describe("stream queue operations", () => {
  it("declares through the CLI, shows each group's pending, lag, idle and consumers in stats, /metrics and the CLI", async () => {
    const Q = "{ops}";
    const declared = await cli(["queue", "declare", Q, "--mode", "stream", "--group", "thumbnailer", "--group", "audit=0", "--max-len", "1000", "--min-idle", "30s"]);
    expect(declared).toMatch(/groups:\s+thumbnailer, audit/);
    expect(declared).toMatch(/trim:\s+max len ~1000/);
    const ids = await t.sy.client.enqueue(Q, ["a", "b", "c"]);
    const lease = t.sy.client.lease(Q, 2, { group: "thumbnailer" });
    await lease.take(2); // held, unsettled: the group's pending entries

    const stats = await t.sy.client.getQueueStats(Q);
    expect(stats).toMatchObject({ ready: 3n, processing: 2n, leaseStreams: 1 });
    const byName = new Map(stats.groups.map((g) => [g.name, g]));
    expect(byName.get("thumbnailer")).toMatchObject({ pending: 2n, lag: 1n, consumers: 1, lastDeliveredId: ids[1] });
    expect(byName.get("thumbnailer")?.oldestPendingIdle).toBeDefined();
    expect(byName.get("audit")).toMatchObject({ pending: 0n, lag: 3n, consumers: 0, lastDeliveredId: "0-0" });

    const metrics = await scrape(t.sy.app.httpAddress);
    expect(metrics.get(key("switchyard_stream_group_pending_entries", { queue: Q, group: "thumbnailer" }))).toBe(2);
    expect(metrics.get(key("switchyard_stream_group_lag_entries", { queue: Q, group: "audit" }))).toBe(3);
    expect(metrics.get(key("switchyard_stream_group_consumers", { queue: Q, group: "thumbnailer" }))).toBe(1);
    expect(metrics.get(key("switchyard_queue_processing_items", { queue: Q }))).toBe(2);

    const printed = await cli(["queue", "stats", Q]);
    expect(printed).toMatch(new RegExp(`\\{ops\\}\\s+thumbnailer\\s+2\\s+1\\s+\\S+\\s+1\\s+${ids[1]}`));
    expect(printed).toMatch(/\{ops\}\s+audit\s+0\s+3\s+-\s+0\s+0-0/);

    expect(await cli(["queue", "group-create", Q, "replay", "--start", "0"])).toContain("created group replay");
    expect(await cli(["queue", "group-move", Q, "audit", ids[2]])).toContain(`moved group audit of ${Q} to ${ids[2]}`);
    expect(await cli(["queue", "group-delete", Q, "replay"])).toContain("deleted group replay");
    const after = new Map((await t.sy.client.getQueueStats(Q)).groups.map((g) => [g.name, g]));
    expect([...after.keys()].sort()).toEqual(["audit", "thumbnailer"]);
    expect(after.get("audit")).toMatchObject({ lag: 0n, lastDeliveredId: ids[2] });
    await lease.close();
  });
});
