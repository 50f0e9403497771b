/**
 * Switchyard's hash-slot arithmetic against Redis's own (CLUSTER KEYSLOT on a
 * cluster-enabled redis-server): the one-slot check of a declaration (Q7) is
 * only as good as it. Keys with braces in every place, including the empty
 * tag "{}" that Redis reads as no tag at all.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startEmbeddedRedis, type EmbeddedRedis } from "../../src/redis/embedded.js";
import { validateQueueSpec } from "../../src/queue/declaration.js";
import { hashTag, slotOf } from "../../src/redis/keys.js";
import { freeBasePort } from "../helpers/cluster.js";
import { below, random } from "../helpers/random.js";

let dir: string;
let server: EmbeddedRedis;
let redis: Redis;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "sy-keyslot-"));
  // A port of its own, with its cluster bus port (+10000) free: on port 0 the bus would take port 10000,
  // which another cluster-enabled redis-server may hold.
  server = await startEmbeddedRedis({
    dir, appendOnly: false, port: await freeBasePort(1), extraArgs: ["--cluster-enabled", "yes", "--cluster-config-file", join(dir, "nodes.conf")],
  });
  redis = new Redis({ path: server.socketPath });
});

afterAll(async () => {
  redis?.disconnect();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const keyslot = (key: string) => redis.call("cluster", "keyslot", key) as Promise<number>;

describe("slotOf", () => {
  it("is Redis's slot for keys whose first brace pair is empty, or unclosed, or nested", async () => {
    const keys = ["x{}{y}", "x{}{y}.processing", "{}{}", "{}{}.processing", "{}", "{", "}", "}{a}", "{{z}}", "{a}{b}", "a{b}c", "{中}.dead", "{😀}", "{y}"];
    const slots = await Promise.all(keys.map(keyslot));
    expect(keys.map(slotOf)).toEqual(slots);
    // What the declaration check relies on: "x{}{y}" is hashed whole, so its processing list is elsewhere.
    expect(slotOf("x{}{y}")).not.toBe(slotOf("x{}{y}.processing"));
    expect(hashTag("x{}{y}")).toBeUndefined();
  });

  it("is Redis's slot for 3,000 seeded keys made mostly of braces", async () => {
    const next = random(7);
    const parts = ["{", "}", "{}", "a", "b.", "é", "😀", ".processing"];
    const keys = Array.from({ length: 3000 }, () => Array.from({ length: 1 + below(next, 8) }, () => parts[below(next, parts.length)]).join(""));
    const pipeline = redis.pipeline();
    for (const key of keys) pipeline.call("cluster", "keyslot", key);
    const slots = (await pipeline.exec())!.map(([err, slot]) => {
      if (err) throw err;
      return slot as number;
    });
    const wrong = keys.filter((key, i) => slotOf(key) !== slots[i]);
    expect(wrong).toEqual([]);
  });
});

describe("declarations whose name has an empty hash tag (Q7)", () => {
  it("are refused: Redis hashes such a name whole, so no derived key shares its slot", () => {
    for (const name of ["x{}{y}", "{}{}"]) {
      for (const mode of ["reliable", "simple"] as const) {
        expect(() => validateQueueSpec({ name, mode }, 0), `${mode} ${name}`).toThrow(/has a "}" but no hash tag; name it with a hash tag such as \{\w+\}/);
      }
    }
  });
});
