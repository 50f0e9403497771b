/**
 * Item and message counts are kept as plain numbers on the hot paths and
 * moved into their Prometheus counters when the registry is read: each read
 * shows everything counted before it, once.
 */
import { describe, expect, it } from "vitest";
import { PromMetrics } from "../../src/metrics/registry.js";

/** The value of one series in the text exposition (undefined: no such series). */
async function value(m: PromMetrics, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(",");
  for (const line of (await m.registry.metrics()).split("\n")) {
    const match = /^(\w+)\{(.*)\} (\S+)$/.exec(line);
    if (match && match[1] === name && match[2].split(",").sort().join(",") === want) return Number(match[3]);
  }
  return undefined;
}

describe("counts kept between reads", () => {
  it("shows each read what was counted before it, and adds up across reads", async () => {
    const m = new PromMetrics({ defaultMetrics: false });
    m.items("a", "enqueued", 3);
    m.items("a", "enqueued");
    m.items("b", "acked", 7);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "a" })).toBe(4);
    expect(await value(m, "switchyard_items_acked_total", { queue: "b" })).toBe(7);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "b" })).toBeUndefined();
    // Read again with nothing new: the same values, not counted twice.
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "a" })).toBe(4);
    m.items("a", "enqueued", 2);
    m.items("b", "enqueued", 5);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "a" })).toBe(6);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "b" })).toBe(5);
    expect(await value(m, "switchyard_items_acked_total", { queue: "b" })).toBe(7);
  });

  it("shows a queue first counted 0 (an Enqueue of duplicates only) as a series at 0", async () => {
    const m = new PromMetrics({ defaultMetrics: false });
    m.items("dup", "enqueued", 0);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "dup" })).toBe(0);
    m.items("dup", "enqueued", 0);
    m.items("dup", "enqueued", 2);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "dup" })).toBe(2);
  });

  it("refuses a negative or infinite count where it is made, and the next reads still work", async () => {
    const m = new PromMetrics({ defaultMetrics: false });
    expect(() => m.items("q", "enqueued", -1)).toThrow(TypeError);
    expect(() => m.items("q", "enqueued", Infinity)).toThrow(TypeError);
    expect(() => m.items("q", "enqueued", NaN)).toThrow(TypeError);
    m.items("q", "enqueued", 3);
    expect(await value(m, "switchyard_items_enqueued_total", { queue: "q" })).toBe(3);
  });

  it("keeps a method of one service apart from a method of the same name in another", async () => {
    const m = new PromMetrics({ defaultMetrics: false });
    const v1 = "grpc.reflection.v1.ServerReflection";
    const alpha = "grpc.reflection.v1alpha.ServerReflection";
    m.received(v1, "ServerReflectionInfo", "bidi_stream");
    m.received(v1, "ServerReflectionInfo", "bidi_stream");
    m.received(alpha, "ServerReflectionInfo", "bidi_stream");
    m.sent(alpha, "ServerReflectionInfo", "bidi_stream");
    const labels = (service: string) => ({ grpc_method: "ServerReflectionInfo", grpc_service: service, grpc_type: "bidi_stream" });
    expect(await value(m, "grpc_server_msg_received_total", labels(v1))).toBe(2);
    expect(await value(m, "grpc_server_msg_received_total", labels(alpha))).toBe(1);
    expect(await value(m, "grpc_server_msg_sent_total", labels(alpha))).toBe(1);
    expect(await value(m, "grpc_server_msg_sent_total", labels(v1))).toBeUndefined();
  });
});
