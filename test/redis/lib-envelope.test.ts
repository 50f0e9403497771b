/**
 * lib.lua's read_item and with_history, the reading and rewriting of a stored
 * value that every retry, return and watchdog recovery does, against the
 * version they replaced (a table per field and a second read per put-back,
 * kept here verbatim as the oracle): the same deliveries, last error and kept
 * bytes, and the same rewritten value, for envelopes as Switchyard writes
 * them, with one or several histories, raw payloads, and mangled bytes.
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeItem } from "../../src/queue/envelope.js";
import { startStandaloneRedis, type StandaloneRedis } from "../helpers/redis.js";
import { below, bytes, random, text } from "../helpers/random.js";

const REFERENCE = `
local function read_varint(s, pos)
  local value, scale = 0, 1
  for _ = 1, 10 do
    local b = string.byte(s, pos)
    if not b then return nil end
    pos = pos + 1
    value = value + (b % 128) * scale
    if b < 128 then return value, pos end
    scale = scale * 128
  end
  return nil
end
local function varint(n)
  local out = {}
  repeat
    local b = n % 128
    n = math.floor(n / 128)
    out[#out + 1] = string.char(n > 0 and b + 128 or b)
  until n == 0
  return table.concat(out)
end
local function len_field(field, bytes)
  return varint(field * 8 + 2) .. varint(#bytes) .. bytes
end
local function varint_field(field, n)
  return varint(field * 8) .. varint(n)
end
local function fields_of(s, from)
  local out, pos, n = {}, from, #s
  while pos <= n do
    local start = pos
    local tag
    tag, pos = read_varint(s, pos)
    if not tag then return nil end
    local field, wire = math.floor(tag / 8), tag % 8
    local data = pos
    if wire == 0 then
      local _
      _, pos = read_varint(s, pos)
      if not pos then return nil end
    elseif wire == 2 then
      local len
      len, pos = read_varint(s, pos)
      if not len then return nil end
      data = pos
      pos = pos + len
    elseif wire == 1 then pos = pos + 8
    elseif wire == 5 then pos = pos + 4
    else return nil end
    if pos > n + 1 or field == 0 then return nil end
    out[#out + 1] = { field, wire, start, pos - 1, data }
  end
  return out
end
local function read_item(value)
  if string.sub(value, 1, 4) ~= "SYE1" then return 0, "", nil end
  local fields = fields_of(value, 5)
  if not fields then return 0, "", nil end
  local kept, has_id, deliveries, err, history = {}, false, 0, "", false
  for _, f in ipairs(fields) do
    local field, wire, first, last, data = f[1], f[2], f[3], f[4], f[5]
    if field == 5 and wire == 2 then
      history = true
      local h = string.sub(value, data, last)
      for _, g in ipairs(fields_of(h, 1) or {}) do
        if g[1] == 1 and g[2] == 0 then deliveries = read_varint(h, g[5]) or 0 end
        if g[1] == 2 and g[2] == 2 then err = string.sub(h, g[5], g[4]) end
      end
    else
      if field == 1 and wire == 2 and last >= data then has_id = true end
      kept[#kept + 1] = string.sub(value, first, last)
    end
  end
  if not has_id and not history then return 0, "", nil end
  return deliveries, err, table.concat(kept)
end
local function with_history(value, deliveries, err, fence)
  local _, _, kept = read_item(value)
  kept = kept or len_field(2, value)
  local h = varint_field(1, deliveries)
  if err ~= "" then h = h .. len_field(2, err) end
  return "SYE1" .. kept .. len_field(5, h .. varint_field(3, fence))
end
`;

/**
 * Per value (ARGV[i]): deliveries, last error, kept bytes (or false), and the value rewritten with a
 * history. The rewrite's deliveries, error and fence come from the lists below by i: varints of one to
 * six bytes and either side of each length's bound, and errors that repeat within the call.
 */
const harness = (withHistory: string) => `
local counts = { 1, 7, 127, 128, 16383, 16384, 2097151, 2097152, 2^40 + 3 }
local fences = { 0, 1, 127, 128, 16383, 16384, 999999, 2097151, 2097152, 2^35 + 1 }
local errs = { "boom", "", "not settled within min_idle (1 s): recovered by the watchdog", "boom" }
local out = {}
for i = 1, #ARGV do
  local count, fence, err = counts[i % #counts + 1], fences[i % #fences + 1], errs[i % #errs + 1]
  local v = ARGV[i]
  local d, e, kept = read_item(v)
  out[#out + 1] = { tostring(d), e, kept or false, ${withHistory} }
end
return out
`;

function protoVarint(n: number): number[] {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b += 128;
    out.push(b);
  } while (n > 0);
  return out;
}
const lenField = (field: number, body: Uint8Array) => Buffer.concat([Buffer.from(protoVarint(field * 8 + 2)), Buffer.from(protoVarint(body.length)), body]);
const varintField = (field: number, n: number) => Buffer.from([...protoVarint(field * 8), ...protoVarint(n)]);

/** A value as the queues may hold it: an envelope (with histories, maybe mangled), a raw payload, or "SYE1" and noise. */
function value(next: () => number): Buffer {
  const kind = below(next, 10);
  if (kind === 0) return Buffer.from(bytes(next, 40));
  if (kind === 1) return Buffer.concat([Buffer.from("SYE1"), Buffer.from(bytes(next, 30))]);
  const headers: Record<string, string> = {};
  for (let i = below(next, 3); i > 0; i--) headers[text(next, 5)] = text(next, 8);
  let v = encodeItem(below(next, 4) === 0 ? "" : text(next, 26), bytes(next, 120), headers, below(next, 3) === 0 ? 0 : 1_764_000_000_000 + below(next, 1e9));
  for (let i = below(next, 3); i > 0; i--) {
    const parts = [varintField(1, below(next, 3) === 0 ? 2 ** 40 + below(next, 100) : below(next, 300))];
    if (below(next, 2) === 0) parts.push(lenField(2, Buffer.from(text(next, 20))));
    if (below(next, 2) === 0) parts.push(varintField(3, below(next, 1e6)));
    if (below(next, 6) === 0) parts.push(Buffer.from(bytes(next, 4))); // a history malformed inside
    let h = lenField(5, Buffer.concat(parts));
    // A history between the other fields rather than last.
    const at = below(next, 3) === 0 ? 4 + below(next, v.length - 3) : v.length;
    v = Buffer.concat([v.subarray(0, at), h, v.subarray(at)]);
  }
  if (below(next, 5) === 0) v = Buffer.concat([v, varintField(1 + below(next, 20), below(next, 1e5))]); // an unknown varint field
  if (below(next, 5) === 0) v = Buffer.concat([v, Buffer.from([(6 + below(next, 10)) * 8 + [1, 5][below(next, 2)]]), Buffer.from(bytes(next, 8))]);
  const mangle = below(next, 6);
  if (mangle === 0) v = v.subarray(0, below(next, v.length + 1));
  if (mangle === 1 && v.length > 4) {
    v = Buffer.from(v);
    v[4 + below(next, v.length - 4)] = below(next, 256);
  }
  return v;
}

describe("lib.lua read_item and with_history", () => {
  let redis: StandaloneRedis;
  const lib = readFileSync(new URL("../../src/redis/scripts/lib.lua", import.meta.url), "utf8");
  beforeAll(async () => {
    redis = await startStandaloneRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it("read 6,000 values as the version they replaced did, and rewrite them alike", async () => {
    const next = random(20261202);
    let envelopes = 0;
    let histories = 0;
    for (let batch = 0; batch < 6; batch++) {
      const values = Array.from({ length: 1000 }, () => value(next));
      const now = await redis.plain.callBuffer("eval", lib + harness("with_history(v, kept, count, err, fence)"), 0, ...values) as unknown[][];
      const before = await redis.plain.callBuffer("eval", REFERENCE + harness("with_history(v, count, err, fence)"), 0, ...values) as unknown[][];
      const read = (row: unknown[]) => {
        const [d, e, kept, rewritten] = row.map((x) => (Buffer.isBuffer(x) ? x.toString("hex") : x));
        return { d: Buffer.from(d as string, "hex").toString(), e, kept, rewritten };
      };
      values.forEach((v, i) => {
        const { d, kept } = read(now[i]);
        expect(read(now[i]), v.toString("hex")).toEqual(read(before[i]));
        if (kept !== null && kept !== false) envelopes++;
        if (d !== "0") histories++;
      });
    }
    // The values reached every case: envelopes and raw values, with and without histories.
    expect(envelopes).toBeGreaterThan(1500);
    expect(envelopes).toBeLessThan(5500);
    expect(histories).toBeGreaterThan(1000);
  });
});
