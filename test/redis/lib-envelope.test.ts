/**
 * lib.lua's read_item and with_history, the reading and rewriting of a stored
 * value that every retry, return and watchdog recovery does, against the
 * version they replaced (a table per field and a second read per put-back,
 * kept here verbatim as the oracle): the same deliveries, last error and kept
 * bytes, and the same rewritten value, for envelopes as Switchyard writes
 * them, with one or several histories, raw payloads, and mangled bytes. (The
 * oracle reads Envelope's and ItemHistory's fields with other wire types, field
 * numbers past 2^29 - 1 and uint32 deliveries as the scripts now do, to agree
 * with envelope.ts: test/redis/envelope-agreement.test.ts.)
 */
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeItem, encodeItem } from "../../src/queue/envelope.js";
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
    if pos > n + 1 or field == 0 or field > 536870911 then return nil end
    out[#out + 1] = { field, wire, start, pos - 1, data }
  end
  return out
end
local function read_item(value)
  if string.sub(value, 1, 4) ~= "SYE1" then return 0, "", nil end
  local fields = fields_of(value, 5)
  if not fields then return 0, "", nil end
  local own = { 2, 2, 2, 0, 2 }
  for _, f in ipairs(fields) do
    if own[f[1]] and f[2] ~= own[f[1]] then return 0, "", nil end
  end
  local kept, has_id, deliveries, err, history = {}, false, 0, "", false
  for _, f in ipairs(fields) do
    local field, wire, first, last, data = f[1], f[2], f[3], f[4], f[5]
    if field == 5 then
      history = true
      local h = string.sub(value, data, last)
      local hf = fields_of(h, 1) or {}
      for _, g in ipairs(hf) do
        if ({ 0, 2, 0 })[g[1]] and g[2] ~= ({ 0, 2, 0 })[g[1]] then hf = {} end
      end
      for _, g in ipairs(hf) do
        if g[1] == 1 then deliveries = (read_varint(h, g[5]) or 0) % 4294967296 end
        if g[1] == 2 then err = string.sub(h, g[5], g[4]) end
      end
    else
      if field == 1 then has_id = last >= data end
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

/** A field with tag (field, wire) and a body that is well-formed for that wire type. */
function anyField(next: () => number, field: number, wire: number): Buffer {
  const tag = Buffer.from(protoVarint(field * 8 + wire));
  if (wire === 0) return Buffer.concat([tag, Buffer.from(protoVarint(below(next, 3) === 0 ? 2 ** 50 + below(next, 1e6) : below(next, 1e6)))]);
  if (wire === 1) return Buffer.concat([tag, Buffer.from(bytes(next, 0)), Buffer.alloc(8, 7)]);
  if (wire === 5) return Buffer.concat([tag, Buffer.alloc(4, 9)]);
  if (wire === 2) return Buffer.concat([tag, Buffer.from(protoVarint(3)), Buffer.from("abc")]);
  return tag; // a group's start or end, or wire types 6 and 7: never well-formed
}

/** Bytes that are not UTF-8 (a lone continuation byte, a truncated sequence, an overlong form). */
const notUtf8 = (next: () => number) => Buffer.from([[0x80], [0xe4, 0xb8], [0xc0, 0xaf], [0xff, 0x61]][below(next, 4)]);

/**
 * A value made to find where envelope.ts and lib.lua could read it apart: an
 * envelope, or "SYE1" and a raw payload, with one to three of: Envelope's own
 * fields with other wire types, groups, field numbers past 2^29 - 1, an empty
 * id after a real one (or the reverse), text that is not UTF-8, header entries
 * and histories malformed inside or with other wire types, deliveries past
 * 2^32, an enqueue time of 8 to 10 bytes, a second payload.
 */
function hostile(next: () => number): Buffer {
  let v = below(next, 4) === 0
    ? Buffer.concat([Buffer.from("SYE1"), lenField(2, Buffer.from(bytes(next, 10)))])
    : encodeItem(text(next, 10), bytes(next, 20), below(next, 2) ? { [text(next, 3)]: text(next, 3) } : {}, below(next, 2) ? 1_764_000_000_000 : 0);
  for (let i = 1 + below(next, 3); i > 0; i--) {
    const own = [0, 2, 2, 2, 0, 2];
    let extra: Buffer;
    switch (below(next, 12)) {
      case 0: { // one of Envelope's fields with another wire type
        const field = 1 + below(next, 5);
        const wires = [0, 1, 2, 5, 3, 4].filter((w) => w !== own[field]);
        extra = anyField(next, field, wires[below(next, wires.length)]);
        break;
      }
      case 1: // a group, or wire type 6 or 7, on a field of its own
        extra = anyField(next, 6 + below(next, 10), [3, 4, 6, 7][below(next, 4)]);
        break;
      case 2: // a field number past 2^29 - 1, some whose tag mod 2^32 names a field of Envelope
        extra = anyField(next, [2 ** 29, 2 ** 29 + 1, 2 ** 32 / 8 + 1, 2 ** 32 / 8 + 5][below(next, 4)], [0, 2][below(next, 2)]);
        break;
      case 3: // an id field after the others: empty, or a real one
        extra = lenField(1, below(next, 2) ? Buffer.alloc(0) : Buffer.from(text(next, 6) || "x"));
        break;
      case 4: // an id or a header that is not UTF-8
        extra = below(next, 2)
          ? lenField(1, Buffer.concat([Buffer.from("i"), notUtf8(next)]))
          : lenField(3, Buffer.concat([lenField(1, notUtf8(next)), lenField(2, notUtf8(next))]));
        break;
      case 5: // a header entry malformed inside, with another wire type inside, or with a field of its own
        extra = lenField(3, [Buffer.from(bytes(next, 6)), anyField(next, 1 + below(next, 2), [0, 1, 5][below(next, 3)]), Buffer.concat([lenField(1, Buffer.from("k")), anyField(next, 9, 0)])][below(next, 3)]);
        break;
      case 6: // a history malformed inside
        extra = lenField(5, Buffer.concat([varintField(1, below(next, 9)), Buffer.from(bytes(next, 5))]));
        break;
      case 7: { // a history with one of its fields in another wire type
        const field = 1 + below(next, 3);
        const wires = [0, 1, 2, 5].filter((w) => w !== [0, 0, 2, 0][field]);
        extra = lenField(5, Buffer.concat([varintField(1, 4), anyField(next, field, wires[below(next, wires.length)])]));
        break;
      }
      case 8: // deliveries past 2^32
        extra = lenField(5, varintField(1, 2 ** 32 + below(next, 50)));
        break;
      case 9: // an enqueue time of 8 to 10 bytes (10: a negative int64)
        extra = Buffer.concat([Buffer.from([0x20]), Buffer.from([...Array.from({ length: 7 + below(next, 3) }, () => 0x80 | below(next, 128)), 1 + below(next, 127)])]);
        break;
      case 10: // a second payload
        extra = lenField(2, Buffer.from(bytes(next, 6)));
        break;
      default: // a well-formed history
        extra = lenField(5, Buffer.concat([varintField(1, below(next, 30)), lenField(2, Buffer.from(text(next, 8)))]));
    }
    v = below(next, 3) === 0 ? Buffer.concat([v.subarray(0, 4), extra, v.subarray(4)]) : Buffer.concat([v, extra]);
  }
  return v;
}

/** Per value: read_item's deliveries, last error and kept bytes, the value retried (with_history), and that without its history (a dead letter requeued). */
const agreement = `
local counts = { 1, 7, 127, 128, 16383, 16384, 2097151, 2097152, 2^40 + 3 }
local errs = { "boom", "", "not settled within min_idle (1 s): recovered by the watchdog", "boom" }
local out = {}
for i = 1, #ARGV do
  local count, err = counts[i % #counts + 1], errs[i % #errs + 1]
  local v = ARGV[i]
  local d, e, kept = read_item(v)
  local retried = with_history(v, kept, count, err, 1000 + i)
  out[#out + 1] = { tostring(d), e, kept or false, retried, without_history(retried) }
end
return out
`;
const COUNTS = [1, 7, 127, 128, 16383, 16384, 2097151, 2097152, 2 ** 40 + 3];
const ERRS = ["boom", "", "not settled within min_idle (1 s): recovered by the watchdog", "boom"];

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

  it("read 6,000 values, hostile ones among them, as envelope.ts reads them; a retry or a requeue leaves the item a worker sees as it was", async () => {
    const next = random(20261205);
    const seen = { envelopes: 0, raw: 0 };
    for (let batch = 0; batch < 6; batch++) {
      const values = Array.from({ length: 1000 }, (_, i) => (i % 2 ? hostile(next) : value(next)));
      const rows = await redis.plain.callBuffer("eval", lib + agreement, 0, ...values) as [Buffer, Buffer, Buffer | null, Buffer, Buffer][];
      values.forEach((v, i) => {
        const [d, e, kept, retried, requeued] = rows[i];
        const item = decodeItem(v);
        const envelope = item.payload.length !== v.length; // a raw value is its own payload; an envelope's payload is shorter
        const at = v.toString("hex");
        expect(kept !== null, `${at}: read_item reads an envelope`).toBe(envelope);
        seen[envelope ? "envelopes" : "raw"]++;
        expect([Number(d.toString()), e.toString("utf8")], at).toEqual([item.deliveries, item.lastError]);
        // Retried: the same item, with the history the retry wrote.
        const { id, payload, headers, enqueueTimeMs } = item;
        const count = COUNTS[(i + 1) % COUNTS.length];
        expect(decodeItem(retried), at).toEqual({ id, payload, headers, enqueueTimeMs, deliveries: count % 2 ** 32, lastError: ERRS[(i + 1) % ERRS.length] });
        // Requeued from the dead letters: as first stored, with no deliveries and no last error.
        expect(decodeItem(requeued), at).toEqual({ id, payload, headers, enqueueTimeMs, deliveries: 0, lastError: "" });
        // A raw value wrapped by its retry goes back as it was pushed.
        if (!envelope) expect(requeued, at).toEqual(v);
        // A time a Timestamp can carry (a worker gets it as one), or none.
        expect(enqueueTimeMs >= 0 && enqueueTimeMs <= 253_402_300_799_999, at).toBe(true);
      });
    }
    expect(seen.envelopes).toBeGreaterThan(2000);
    expect(seen.raw).toBeGreaterThan(1000);
  });
});
