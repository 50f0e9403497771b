/**
 * lua-lib.ts: a script carries only the part of lib.lua it uses, and that
 * part is whole (no lib function a kept one names is left out).
 */
import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { libFor, statementsOf } from "../../src/redis/lua-lib.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";

const dir = new URL("../../src/redis/scripts/", import.meta.url);
const load = (name: string) => readFileSync(new URL(name, dir), "utf8");
const lib = load("lib.lua");

const LIB = `--[[ a header
local not_a_statement = 1
]]
local A = "a"
-- uses A
local function one(x)
  return A .. x
end
local function two()
  return one("2")
end
local T = {
  k = 1,
}
local function unused()
  -- two() named only in a comment
  return T
end`;

describe("libFor", () => {
  it("keeps what the users name and what that names in turn, in the library's order", () => {
    expect(libFor(LIB, "return two()")).toBe(`local A = "a"
local function one(x)
  return A .. x
end
local function two()
  return one("2")
end`);
    expect(libFor(LIB, "return unused()")).toBe(`local T = {
  k = 1,
}
local function unused()
  -- two() named only in a comment
  return T
end`);
  });

  it("keeps nothing for code that names none of it, a name in a comment included", () => {
    expect(libFor(LIB, "-- two()\nreturn 1")).toBe("");
    expect(libFor(LIB, "--[[ one(x) ]]\nreturn not_a_statement")).toBe("");
  });

  it("reads a name after a \"--\" in a string on a line of code, and a comment begun mid-line, as names", () => {
    expect(libFor(LIB, 'return "--" .. one("x")')).toContain("local function one(x)");
    expect(libFor(LIB, "return 1 -- two()")).toContain("local function two()");
  });

  it("refuses a comment at the start of a line inside a statement, which would cut the statement short", () => {
    expect(() => libFor("local function f(x)\n-- a comment\n  return x\nend", "return f(1)")).toThrow(/a line outside any statement .*"  return x"/);
  });

  it("refuses a library with anything but local statements at its top level", () => {
    expect(() => libFor(`${LIB}\nredis.call("DEL", "x")`, "return two()")).toThrow(/only local statements may stand at the top level, not "redis.call/);
    expect(() => libFor(`${LIB}\nfunction g() end`, "return two()")).toThrow(/not "function g\(\) end"/);
  });
});

describe("lib.lua as the scripts carry it", () => {
  let redis: StandaloneRedis;
  beforeAll(async () => {
    redis = await startStandaloneRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  const defined = new Set(statementsOf(lib).flatMap((s) => s.defines));
  const users = readdirSync(dir).filter((f) => f.endsWith(".lua") && f !== "lib.lua" && f !== "push-values.lua");
  const words = (code: string) => new Set(code.replace(/--\[\[[\s\S]*?\]\]/g, "").replace(/--[^\n]*/g, "").match(/[A-Za-z_]\w*/g) ?? []);

  it("every script that names a lib function gets it, with all it names, and Redis compiles the whole", async () => {
    let trimmed = 0;
    for (const file of users) {
      const body = (file === "push-lease.lua" ? load("push-values.lua") : "") + load(file).replace(/^#!.*\n/, "");
      const part = libFor(lib, body);
      const kept = new Set(statementsOf(part || "local _ = 0").flatMap((s) => s.defines));
      // Each lib name the script or its kept part names is defined in the part.
      for (const name of words(part + "\n" + body)) {
        if (defined.has(name)) expect(kept.has(name), `${file}: ${name}`).toBe(true);
      }
      if (kept.size < defined.size) trimmed++;
      const script = `${part}\n${body}`;
      await expect(redis.plain.script("LOAD", script), file).resolves.toMatch(/^[0-9a-f]{40}$/);
    }
    // Most scripts use a small part of the library.
    expect(trimmed).toBe(users.length);
  });

  it("push-lease.lua carries the six lib functions it uses and no others", () => {
    const part = libFor(lib, load("push-lease.lua") + load("push-values.lua"));
    expect(statementsOf(part).flatMap((s) => s.defines).filter((n) => /^[a-z_]+$/.test(n) && !["byte", "sub", "char", "find", "format", "floor", "concat"].includes(n)))
      .toEqual(["delivery_field", "derived", "claim_member", "count_value", "wrong_type", "lease_items"]);
  });
});
