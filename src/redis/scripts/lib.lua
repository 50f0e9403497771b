--[[
  Shared by the queue scripts: scripts.ts puts the part each one uses in front
  of it (lua-lib.ts; only `local` statements and comments at the top level,
  and no comment at the start of a line inside a statement).

  Stored items. A value in a queue, processing, delayed or dead-letter key is
  an "SYE1" envelope (queue.proto's Envelope) or a raw payload. Once a
  delivery of an item came back, it is stored again as an envelope with its
  history (field 5, ItemHistory: deliveries so far, last error, last fence);
  a raw payload becomes the payload of an envelope with no id. Values are
  read as envelopes exactly when envelope.ts reads them so: the magic bytes,
  well-formed fields (field numbers 1 to 2^29 - 1, no groups, and Envelope's
  own fields 1 to 5 with their own wire types), and an id (the last id field
  not empty) or a history. A history malformed inside (ItemHistory's fields
  with other wire types too) counts as one and is read as none; deliveries are
  read as a uint32 (mod 2^32), as protobuf reads them.

  Deliveries. The leases hash holds one record per live delivery, under the
  field "<fence>@<owner>" (owner: the instance that leased it):
    "<claim>:<value>"  claim: "v" the recovery set's member is the value,
                       "d" it is DERIVED .. field, "-" no recovery set.
  (A delivery's number is its item's deliveries so far plus one: read from the
  value when needed, not stored.)
  With a recovery set, also "m:<sha1(value)>" → the field of the delivery whose
  claim member is the value itself (one per value), and "n:<sha1(value)>" → how
  many deliveries of the value are live. Always: "live" (deliveries live) and
  "completed" (acked or dropped).
]]
local DERIVED = "\0SYC"

-- The library functions the parsing and encoding below call most, as upvalues: a global's
-- lookup (the table "string", then its field) costs more than the call itself in a tight loop.
local byte, sub, char, find, format, floor, concat = string.byte, string.sub, string.char, string.find, string.format, math.floor, table.concat

-- The field "<fence>@<owner>" of a delivery's record. A fence is written with %d: Lua's own number
-- text has 14 significant digits, and from 10^14 on it would round fences ("1e+14") and join records.
local function delivery_field(fence, owner)
  return format("%d", fence) .. "@" .. owner
end

-- Whether a recovery set member is DERIVED .. a field (read as bytes: no string is made).
local function derived(member)
  local z, s, y, c = byte(member, 1, 4)
  return z == 0 and s == 83 and y == 89 and c == 67
end

-- A protobuf varint at `pos`: its value and the position after it (nil when malformed).
local function read_varint(s, pos)
  local value, scale = 0, 1
  for _ = 1, 10 do
    local b = byte(s, pos)
    if not b then return nil end
    pos = pos + 1
    value = value + (b % 128) * scale
    if b < 128 then return value, pos end
    scale = scale * 128
  end
  return nil
end

-- The bytes of a varint of `n` in [0, 2^21) (every count and most fences), as one to three numbers.
local function short_varint(n)
  if n < 128 then return n end
  local hi = floor(n / 16384)
  local lo, mid = n % 128, floor(n / 128) % 128
  if hi == 0 then return lo + 128, mid end
  return lo + 128, mid + 128, hi
end

local function varint(n)
  if n >= 0 and n < 2097152 then return char(short_varint(n)) end
  local out = {}
  repeat
    local b = n % 128
    n = floor(n / 128)
    out[#out + 1] = char(n > 0 and b + 128 or b)
  until n == 0
  return concat(out)
end

local function len_field(field, bytes)
  return varint(field * 8 + 2) .. varint(#bytes) .. bytes
end

-- A varint field of a number under 16 (its tag is one byte), made in one string where it can be.
local function varint_field(field, n)
  if n >= 0 and n < 2097152 then return char(field * 8, short_varint(n)) end
  return char(field * 8) .. varint(n)
end

-- The protobuf field at `pos` of `s` (whose length is `n`): its number, wire type, where its
-- payload starts, the position after it and, for a varint with `want_value`, its value; nil when
-- malformed. One-byte tags and lengths (all but long fields') are read without read_varint, and a
-- varint whose value is not wanted is stepped over by its last byte (the first under 128).
local function next_field(s, pos, n, want_value)
  local tag = byte(s, pos)
  if tag < 128 then pos = pos + 1 else tag, pos = read_varint(s, pos) end
  if not tag then return nil end
  local wire = tag % 8
  local field = (tag - wire) / 8
  local data, v = pos, nil
  if wire == 0 then
    if want_value then
      v, pos = read_varint(s, pos)
      if not v then return nil end
    else
      local last = find(s, "[%z\1-\127]", pos)
      if not last or last > pos + 9 then return nil end
      pos = last + 1
    end
  elseif wire == 2 then
    local len = byte(s, pos)
    if len and len < 128 then pos = pos + 1 else len, pos = read_varint(s, pos) end
    if not len then return nil end
    data = pos
    pos = pos + len
  elseif wire == 1 then pos = pos + 8
  elseif wire == 5 then pos = pos + 4
  else return nil end
  if pos > n + 1 or field == 0 or field > 536870911 then return nil end
  return field, wire, data, pos, v
end

-- The wire type of each field of Envelope (1 id, 2 payload, 3 a header, 4 enqueue time, 5 history).
local ENVELOPE_WIRE = { 2, 2, 2, 0, 2 }
-- The same of ItemHistory (1 deliveries, 2 last error, 3 last fence).
local HISTORY_WIRE = { 0, 2, 0 }

-- The fields of a protobuf message `s` as { field, wire type, first, last, payload first }; nil when malformed.
local function fields_of(s, from)
  local out, pos, n = {}, from, #s
  while pos <= n do
    local field, wire, data, after = next_field(s, pos, n)
    if not field then return nil end
    out[#out + 1] = { field, wire, pos, after - 1, data }
    pos = after
  end
  return out
end

-- An ItemHistory's deliveries and last error over `deliveries` and `err` (as merging it would); nil when malformed.
local function read_history(h, deliveries, err)
  local pos, n = 1, #h
  while pos <= n do
    local field, wire, data, after, v = next_field(h, pos, n, true)
    if not field then return nil end
    local own = HISTORY_WIRE[field]
    if own and wire ~= own then return nil end
    if field == 1 then deliveries = v % 4294967296 end
    if field == 2 then err = sub(h, data, after - 1) end
    pos = after
  end
  return deliveries, err
end

--[[
  Reads a stored value: its deliveries so far, its last error, and the bytes
  of its envelope fields other than the history, or nil for those when it is
  a raw payload (then the value itself is the payload). One pass over the
  fields, with no table per field: the watchdog and every retry read each
  value they put back (the fields as fields_of reads them; a history that is
  malformed inside is dropped and read as none, as fields_of(h) or {} did).
]]
local function read_item(value)
  local s, y, e, one = byte(value, 1, 4)
  if s ~= 83 or y ~= 89 or e ~= 69 or one ~= 49 then return 0, "", nil end -- not "SYE1"
  local pos, n = 5, #value
  local has_id, history, deliveries, err = false, false, 0, ""
  -- The kept bytes: from `kept_from` on, with the pieces before each history field.
  local kept_from, pieces = 5, nil
  while pos <= n do
    local field, wire, data, after = next_field(value, pos, n)
    if not field then return 0, "", nil end
    local own = ENVELOPE_WIRE[field]
    if own and wire ~= own then return 0, "", nil end
    if field == 5 then
      history = true
      local d, e = read_history(sub(value, data, after - 1), deliveries, err)
      if d then deliveries, err = d, e end
      pieces = pieces or {}
      pieces[#pieces + 1] = sub(value, kept_from, pos - 1)
      kept_from = after
    elseif field == 1 then
      has_id = after > data -- the last id field is the id
    end
    pos = after
  end
  if not has_id and not history then return 0, "", nil end
  if not pieces then return deliveries, err, sub(value, 5) end
  pieces[#pieces + 1] = sub(value, kept_from)
  return deliveries, err, concat(pieces)
end

-- ItemHistory's last_error field for each error a call wrote (a batch's items mostly share one).
local error_fields = {}

-- The item with its history: an envelope (a raw payload wrapped as one) carrying ItemHistory.
-- `kept` is read_item(value)'s third answer (nil for a raw payload), read once by the caller.
local function with_history(value, kept, deliveries, err, fence)
  kept = kept or len_field(2, value)
  -- ItemHistory { 1 deliveries, 2 last_error, 3 last_fence } as field 5 (tag 42, "*"), in one
  -- concatenation.
  local d, f, e = varint_field(1, deliveries), varint_field(3, fence), ""
  if err ~= "" then
    e = error_fields[err]
    if not e then
      e = len_field(2, err)
      error_fields[err] = e
    end
  end
  return "SYE1" .. kept .. "*" .. varint(#d + #e + #f) .. d .. e .. f
end

--[[
  The item as first stored, without its history: an envelope with an id as it
  was; a raw payload as it was pushed (wrapped, it is one payload field and
  nothing else, and read as raw again); any other envelope without an id (an
  outside writer's, with headers or a time) keeps its fields and an empty
  history, without which it would read as raw.
]]
local function without_history(value)
  local _, _, kept = read_item(value)
  if not kept then return value end
  local fields = fields_of(kept, 1)
  local has_id = false
  for _, f in ipairs(fields) do
    if f[1] == 1 then has_id = f[4] >= f[5] end -- the last id field is the id
  end
  if has_id then return "SYE1" .. kept end
  if #fields == 0 then return "" end
  if #fields == 1 and fields[1][1] == 2 then
    local payload = sub(kept, fields[1][5], fields[1][4])
    local _, _, inner = read_item(payload)
    if not inner then return payload end
  end
  return "SYE1" .. kept .. "*\0"
end

-- Splits a delivery record into its claim kind and value.
local function parse_record(record)
  return sub(record, 1, 1), sub(record, 3)
end

-- The recovery set's member for a delivery.
local function claim_member(kind, value, field)
  if kind == "v" then return value end
  return DERIVED .. field
end

-- The fence of a field "<fence>@<owner>": a number, finite and not negative, else nil (a field of
-- another client's). varint() would never end on a negative, infinite or NaN fence.
local function fence_of(field)
  local at = find(field, "@", 1, true)
  local fence = at and tonumber(sub(field, 1, at - 1))
  if fence and fence >= 0 and fence < math.huge then return fence end
  return nil
end

-- The wait before attempt `count` + 1 under the retry policy
-- "initial,multiplier,max,jitter" (ms, factor, ms, fraction); `r` is in [0, 1).
local policies = {}
local function backoff(policy, count, r)
  -- Parsed once per call of the script (a batch's settles share one policy).
  local p = policies[policy]
  if not p then
    local initial, multiplier, max, jitter = string.match(policy, "^([^,]+),([^,]+),([^,]+),([^,]+)$")
    p = { tonumber(initial), tonumber(multiplier), tonumber(max), tonumber(jitter) }
    policies[policy] = p
  end
  local initial, multiplier, max, jitter = p[1], p[2], p[3], p[4]
  if initial <= 0 then return 0 end
  local wait = initial * multiplier ^ (count - 1)
  if wait > max then wait = max end
  return floor(wait * (1 - jitter * r))
end

-- The i-th of a low-discrepancy sequence from the seed `r` (spreads jitter over one batch).
local function nth_random(r, i)
  local x = r + i * 0.6180339887498949
  return x - floor(x)
end

-- The most tombstones a queue keeps (fences of deliveries returned or recovered), for
-- telling a superseded token from one whose item was merely settled.
local TOMBSTONES = 100000

--[[
  A queue's keys and the sizes that keep a script from touching a key it emptied:
  while a cluster slot migrates, a key that disappears mid-script is "non local",
  and the script would stop halfway through its batch.
]]
local function queue_context(keys, recovery)
  local k = {
    queue = keys.queue, processing = keys.processing, leases = keys.leases, recovery = keys.recovery,
    dead = keys.dead, delayed = keys.delayed, returned = keys.returned,
  }
  k.pending = redis.call("LLEN", k.processing)
  k.claims = recovery and redis.call("ZCARD", k.recovery) or 0
  -- Deliveries removed and completed by this call: counted once at its end (finish_call), not per item.
  k.removed, k.completed = 0, 0
  return k
end

-- Counts one more live delivery of the value with sha1 `sha` (its "n:" field). A count another
-- client left that is no integer ("2.5") would fail HINCRBY, after the item moved; it is
-- replaced by 1 instead (too few copies counted risks a second delivery, too many a lost one).
local function count_value(leases, sha)
  local r = redis.pcall("HINCRBY", leases, "n:" .. sha, 1)
  if type(r) == "table" and r.err then redis.call("HSET", leases, "n:" .. sha, 1) end
end

-- Removes a live delivery: its record and claim, and one copy of its value from processing.
-- `sha` is sha1hex(value) and `n` the value's "n:" count (false: none) when the caller has read
-- them already; `k.claims_gone` when the caller takes the claims out of the recovery set itself.
local function remove_delivery(k, field, kind, value, sha, n)
  k.removed = k.removed + 1
  if k.pending > 0 then k.pending = k.pending - redis.call("LREM", k.processing, "-1", value) end
  if kind == "-" then
    redis.call("HDEL", k.leases, field)
    return
  end
  if k.claims > 0 and not k.claims_gone then k.claims = k.claims - redis.call("ZREM", k.recovery, claim_member(kind, value, field)) end
  sha = sha or redis.sha1hex(value)
  -- The record, the value's own claim (kind "v") and its count, in one HDEL when this was the
  -- value's last live delivery (the usual case: values are seldom equal); else the count goes down.
  if n == nil then n = redis.call("HGET", k.leases, "n:" .. sha) end
  n = tonumber(n)
  local gone = {}
  gone[1] = field
  if kind == "v" then gone[2] = "m:" .. sha end
  if not n or n <= 1 then
    gone[#gone + 1] = "n:" .. sha
  else
    -- Written, not HINCRBY'd: a count another client left that is no integer ("2.5") would fail
    -- HINCRBY midway through the call; its whole part goes down by one instead.
    redis.call("HSET", k.leases, "n:" .. sha, floor(n) - 1)
  end
  redis.call("HDEL", k.leases, unpack(gone))
end

--[[
  The writes of put_back and tombstone, by where they go: { command, the key's name in k }.
  Made at once, with the removal of their delivery (a call that fails later keeps both), unless
  the call set k.gathered: then they are gathered, in order, and made in finish_call, one command
  per destination (in chunks of GATHERED_ARGS arguments). A call may gather only when its loop
  reads none of these keys and nothing in it can fail once a delivery is removed, else the items
  it removed would not come back (recover.lua says why nothing in its loop can).
]]
local WRITES = {
  front = { "RPUSH", "queue" }, back = { "LPUSH", "queue" }, dead = { "LPUSH", "dead" },
  delayed = { "ZADD", "delayed" }, returned = { "ZADD", "returned" },
}
local GATHERED = { "front", "back", "dead", "delayed", "returned" }
local GATHERED_ARGS = 1000

local function write(k, to, a, b)
  local gathered = k.gathered
  if gathered then
    local args = gathered[to]
    if not args then
      args = {}
      gathered[to] = args
    end
    args[#args + 1] = a
    if b ~= nil then args[#args + 1] = b end
    return
  end
  local w = WRITES[to]
  if b ~= nil then redis.call(w[1], k[w[2]], a, b) else redis.call(w[1], k[w[2]], a) end
end

local function write_gathered(k)
  for _, to in ipairs(GATHERED) do
    local args, w = k.gathered[to], WRITES[to]
    if args then
      for from = 1, #args, GATHERED_ARGS do
        redis.call(w[1], k[w[2]], unpack(args, from, math.min(#args, from + GATHERED_ARGS - 1)))
      end
    end
  end
  if k.expire then redis.call("PEXPIRE", k.queue, k.expire) end
  k.gathered = nil
end

-- Remembers that the delivery with `fence` was taken from its holder (returned or recovered), in
-- the tombstones at the score `now` (a number, or its text as the script was given it); the set is
-- cut back to TOMBSTONES, the newest, once at the call's end (finish_call).
local function tombstone(k, fence, now)
  write(k, "returned", now, fence)
  k.tombstoned = true
end

-- What a call writes once at its end, not per item: what it gathered (see WRITES), its removed and
-- completed deliveries into the counts ("live", "completed"), and the tombstones' bound. A call checks the keys it writes before
-- it removes anything (wrong_type): an error between would keep the removals (Redis keeps a
-- script's writes before its error) without their counts.
local function finish_call(k)
  if k.gathered then write_gathered(k) end
  if k.removed > 0 then redis.call("HINCRBY", k.leases, "live", -k.removed) end
  if k.completed > 0 then redis.call("HINCRBY", k.leases, "completed", k.completed) end
  if k.tombstoned and redis.call("ZCARD", k.returned) > TOMBSTONES then
    redis.call("ZREMRANGEBYRANK", k.returned, 0, -(TOMBSTONES + 1))
  end
end

--[[
  Refuses, before any write, a key that holds another type than the script will
  write to it (a Redis error mid-script keeps the writes before it: the item
  taken out would be lost). `checks`: key, wanted type, key, wanted type, ...
  Returns an error "SYWRONGTYPE <type> <wanted> <key>" for the first such key, else nil.
]]
local function wrong_type(checks)
  for i = 1, #checks, 2 do
    local kind = redis.call("TYPE", checks[i]).ok
    if kind ~= "none" and kind ~= checks[i + 1] then
      return redis.error_reply("SYWRONGTYPE " .. kind .. " " .. checks[i + 1] .. " " .. checks[i])
    end
  end
  return nil
end

--[[
  A fence counter's value, or (as wrong_type does for a key of another type) an
  error "SYWRONGTYPE string integer <key>" when another client left a string in
  it that is no integer: INCRBY, or a comparison with it, would fail the call
  midway. A missing counter is 0.
]]
local function counter(key)
  local v = redis.call("GET", key)
  if v and not string.match(v, "^%-?%d+$") then
    return nil, redis.error_reply("SYWRONGTYPE string integer " .. key)
  end
  return tonumber(v or "0"), nil
end

--[[
  Puts the item of a removed delivery back with its history: to the dead letters
  when `dead`, else into the delayed set when `delay` > 0, else onto the queue,
  at the front (taken next) or the back. `kept` is read_item(value)'s third
  answer. Returns -1 when dead-lettered, else the time it is due (0: at once).
]]
local function put_back(k, value, kept, count, err, fence, now, delay, front, dead, ttl)
  local stored = with_history(value, kept, count, err, fence)
  if dead then
    write(k, "dead", stored)
    return -1
  end
  if delay > 0 then
    write(k, "delayed", now + delay, stored)
    return now + delay
  end
  write(k, front and "front" or "back", stored)
  if ttl > 0 then
    if k.gathered then k.expire = ttl else redis.call("PEXPIRE", k.queue, ttl) end
  end
  return 0
end

--[[
  A stored item as the fields of a stream entry (see entry_envelope below):
  "payload" and its payload, then each header; a raw value is the payload.
]]
local function entry_fields(value)
  local _, _, kept = read_item(value)
  if not kept then return { "payload", value } end
  local out, payload = {}, ""
  for _, f in ipairs(fields_of(kept, 1) or {}) do
    if f[1] == 2 then
      payload = sub(kept, f[5], f[4])
    elseif f[1] == 3 then
      -- A header entry (1 key, 2 value); one malformed inside is left out, as envelope.ts leaves it out.
      local entry, k, v = sub(kept, f[5], f[4]), "", ""
      local parts = fields_of(entry, 1)
      for _, g in ipairs(parts or {}) do
        if (g[1] == 1 or g[1] == 2) and g[2] ~= 2 then parts = nil break end
        if g[1] == 1 then k = sub(entry, g[5], g[4]) end
        if g[1] == 2 then v = sub(entry, g[5], g[4]) end
      end
      if parts then
        out[#out + 1] = k
        out[#out + 1] = v
      end
    end
  end
  table.insert(out, 1, payload)
  table.insert(out, 1, "payload")
  return out
end

--[[
  A stream entry as a dead letter: an envelope with the entry id as its id, the
  "payload" field as its payload, every other field as a header, the time of
  the id as its enqueue time, and its history.
]]
local function entry_envelope(id, fields, deliveries, err)
  local parts, payload = { "SYE1", len_field(1, id) }, ""
  for i = 1, #fields, 2 do
    if fields[i] == "payload" then payload = fields[i + 1]
    else parts[#parts + 1] = len_field(3, len_field(1, fields[i]) .. len_field(2, fields[i + 1])) end
  end
  if payload ~= "" then table.insert(parts, 3, len_field(2, payload)) end
  parts[#parts + 1] = varint_field(4, tonumber(string.match(id, "^(%d+)")) or 0)
  local h = varint_field(1, deliveries)
  if err ~= "" then h = h .. len_field(2, err) end
  parts[#parts + 1] = len_field(5, h)
  return concat(parts)
end

--[[
  settle.lua's work, shared with settle-lease.lua: KEYS and ARGV[1..6] as
  settle.lua's, the settles' quadruples from ARGV[from]. Returns settle.lua's
  answer (or its SYWRONGTYPE error reply, having changed nothing).
]]
local function settle_all(KEYS, ARGV, from)
  local now, max = tonumber(ARGV[1]), tonumber(ARGV[2])
  local recovery = ARGV[3] == "1"
  local policy, seed, ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local k = queue_context({
    queue = KEYS[1], processing = KEYS[2], leases = KEYS[3], recovery = KEYS[5],
    dead = KEYS[6], delayed = KEYS[7], returned = KEYS[8],
  }, recovery)
  -- Settles that put an item back need the keys they may write to be of their types (see
  -- wrong_type): a retry or return the queue, delayed set or dead letters (a return also the
  -- tombstones), a kill the dead letters. Checked first, nothing can fail once a delivery is
  -- removed, so the counts written at the end (finish_call) stay in step with the removals.
  local checks = {}
  for i = from, #ARGV, 4 do
    local action = ARGV[i]
    if action == "r" or action == "b" or action == "u" then
      checks = { KEYS[1], "list", KEYS[7], "zset", KEYS[6], "list", KEYS[8], "zset" }
      break
    elseif action == "k" then
      checks = { KEYS[6], "list" }
    end
  end
  local refused = wrong_type(checks)
  if refused then return refused end
  local issued, bad = counter(KEYS[4])
  if bad then return bad end
  local live = tonumber(redis.call("HGET", KEYS[3], "live") or "0")
  local out = {}
  for i = from, #ARGV, 4 do
    local action, field, reason, delay = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local record = live > 0 and redis.call("HGET", KEYS[3], field)
    local code, due = 1, 0
    if not record then
      local fence = fence_of(field)
      if not fence or fence < 1 or fence > issued then code = -3
      elseif redis.call("ZSCORE", KEYS[8], fence) then code = -2
      else code = -1 end
    else
      local kind, value = parse_record(record)
      if action == "x" then
        if kind ~= "-" and k.claims > 0 then redis.call("ZADD", KEYS[5], "XX", now, claim_member(kind, value, field)) end
      elseif action ~= "c" then
        remove_delivery(k, field, kind, value)
        live = live - 1
        if action == "a" or action == "d" then
          k.completed = k.completed + 1
        elseif action == "u" then
          redis.call("RPUSH", KEYS[1], value)
        else
          local before, last, kept = read_item(value)
          local count = before + 1
          local err = action == "b" and last or reason
          local wait = 0
          if action == "r" then
            wait = delay == "" and backoff(policy, count, nth_random(seed, i)) or tonumber(delay)
          end
          local dead = action == "k" or (max > 0 and count >= max)
          -- A field with no fence (another client's) is put back as fence 0, not left half removed.
          local fence = fence_of(field) or 0
          due = put_back(k, value, kept, count, err, fence, now, wait, action == "b", dead, ttl)
          if due < 0 then code, due = 2, 0 end
          if action == "b" then tombstone(k, fence, now) end
        end
      end
    end
    out[#out + 1] = code
    out[#out + 1] = due
  end
  finish_call(k)
  return out
end

--[[
  lease.lua's work, shared with settle-lease.lua and push-lease.lua: KEYS[1..5]
  as lease.lua's; ARGV a table of lease.lua's five arguments; `length` the
  queue list's length when the caller knows it (push-lease.lua, from its
  LPUSH), else nil (read with LLEN). Returns lease.lua's answer.
]]
local function lease_items(KEYS, ARGV, length)
  local max = math.min(tonumber(ARGV[2]), length or redis.call("LLEN", KEYS[1]))
  if max <= 0 then return {} end
  local recovery = ARGV[3] == "1"
  -- The keys written after an item is moved must be of their types: a Redis error there would leave
  -- the item moved with no record of its delivery (see wrong_type). The processing list LMOVE checks
  -- itself, and the fence counter INCRBY, before anything is moved (a TYPE call each would cost as much).
  local checks = { KEYS[3], "hash" }
  if recovery then
    checks[3] = KEYS[5]
    checks[4] = "zset"
  end
  local refused = wrong_type(checks)
  if refused then return refused end
  local owner = ARGV[5]
  local out = {}
  local issued = redis.pcall("INCRBY", KEYS[4], max)
  if type(issued) == "table" then return wrong_type({ KEYS[4], "string" }) or error(issued) end
  local first = issued - max + 1
  for i = 1, max do
    local value = redis.call("LMOVE", KEYS[1], KEYS[2], "RIGHT", "LEFT")
    local fence = first + i - 1
    local field = delivery_field(fence, owner)
    local kind = "-"
    if recovery then
      local sha = redis.sha1hex(value)
      -- The first live delivery of a value claims under the value itself (the seed's record);
      -- an equal value leased meanwhile gets a member of its own, so each delivery has its claim.
      -- (A value that looks like a derived member never claims under itself.)
      local plain = not derived(value)
      if plain and redis.call("HSETNX", KEYS[3], "m:" .. sha, field) == 1 then kind = "v" else kind = "d" end
      count_value(KEYS[3], sha)
      redis.call("ZADD", KEYS[5], ARGV[1], claim_member(kind, value, field))
    end
    redis.call("HSET", KEYS[3], field, kind .. ":" .. value)
    out[#out + 1] = value
    out[#out + 1] = fence
  end
  redis.call("HINCRBY", KEYS[3], "live", max)
  if recovery and tonumber(ARGV[4]) > 0 then redis.call("PEXPIRE", KEYS[5], ARGV[4]) end
  return out
end

--[[
  stream-settle.lua's work, shared with stream-settle-lease.lua: KEYS (stream,
  dead-letter list, counts hash) and ARGV[1..5] as stream-settle.lua's, the
  settles' octuples from ARGV[from]. Returns stream-settle.lua's answer.
]]
local function stream_settle_all(KEYS, ARGV, from)
  local stream = KEYS[1]
  local max, min_idle, policy, seed, park = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
  -- Every settle reads the counts hash; a kill, or a retry that may be the last, writes the dead letters.
  -- A key of another type would fail the call midway, the settles before it applied (see wrong_type).
  local checks = { KEYS[3], "hash" }
  for i = from, #ARGV, 8 do
    if ARGV[i] == "k" or ARGV[i] == "r" then
      checks = { KEYS[3], "hash", KEYS[2], "list" }
      break
    end
  end
  local refused = wrong_type(checks)
  if refused then return refused end
  local out, completed = {}, 0
  for i = from, #ARGV, 8 do
    local action, group, id, count, consumer, fence, reason, delay =
      ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
    -- A group or stream deleted since (or a token naming neither) holds nothing.
    local read = redis.pcall("XPENDING", stream, group, id, id, 1)
    local pending = type(read) == "table" and not read.err and read[1]
    local code, wait, claimed = 1, 0, nil
    local err_field, fence_field = "e:" .. group .. ":" .. id, "f:" .. group .. ":" .. id
    if not pending then code = -1
    elseif pending[2] ~= consumer or pending[4] ~= count or redis.call("HGET", KEYS[3], fence_field) ~= fence then code = -2
    elseif action == "a" or action == "d" then
      redis.call("XACK", stream, group, id)
      completed = completed + 1
      redis.call("HDEL", KEYS[3], err_field, fence_field)
    elseif action == "x" then
      claimed = redis.call("XCLAIM", stream, group, consumer, 0, id, "JUSTID")
    elseif action == "k" or (action == "r" and count >= max) then
      -- An entry trimmed from the stream while pending has nothing left to dead-letter: it is only acked.
      local entry = redis.call("XRANGE", stream, id, id)[1]
      if entry then
        redis.call("LPUSH", KEYS[2], entry_envelope(id, entry[2], count, reason))
        code = 2
      end
      redis.call("XACK", stream, group, id)
      redis.call("HDEL", KEYS[3], err_field, fence_field)
    elseif action == "r" then
      wait = delay == "" and backoff(policy, count, nth_random(seed, i)) or tonumber(delay)
      if wait > min_idle then wait = min_idle end
      if reason ~= "" then redis.call("HSET", KEYS[3], err_field, reason) end
      claimed = redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle - wait, "JUSTID")
    elseif action == "b" then
      claimed = redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle, "JUSTID")
    elseif action == "u" then
      claimed = redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle, "RETRYCOUNT", count - 1, "JUSTID")
    end
    if claimed and #claimed == 0 then
      -- Trimmed from the stream while pending: XCLAIM found no entry and took it out of the pending
      -- list, so nothing is held (an extend is refused, not answered with a lease that cannot end).
      redis.call("HDEL", KEYS[3], err_field, fence_field)
      code, wait = -1, 0
    end
    out[#out + 1] = code
    out[#out + 1] = wait
  end
  if completed > 0 then redis.call("HINCRBY", KEYS[3], "completed", completed) end
  return out
end

--[[
  stream-lease.lua's work, shared with stream-settle-lease.lua: KEYS (stream,
  fence counter, dead-letter list, counts hash) and ARGV[1..8] as
  stream-lease.lua's. Returns stream-lease.lua's answer.
]]
local function stream_lease(KEYS, ARGV)
  local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
  local max, min_idle, max_deliveries = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  -- The keys written after entries are claimed or read must be of their types: a Redis error there would
  -- leave them pending for this consumer with no record of their delivery, counted once more (see wrong_type).
  local refused = wrong_type({ KEYS[2], "string", KEYS[3], "list", KEYS[4], "hash" })
  if refused then return refused end
  local _, bad = counter(KEYS[2])
  if bad then return bad end
  local out, dead, trimmed = {}, 0, 0
  -- A pending entry trimmed from the stream: the claim took it out of the pending list; its records go too.
  local function forget(id)
    redis.call("HDEL", KEYS[4], "e:" .. group .. ":" .. id, "f:" .. group .. ":" .. id)
    trimmed = trimmed + 1
  end
  -- Each reclaimed entry (its delivery counted by the claim): delivered, or past max deliveries dead-lettered
  -- and acked. `counts`: delivery counts known already, by id (else read from the pending list).
  local function reclaimed(entries, counts)
    for _, entry in ipairs(entries) do
      local id, fields = entry[1], entry[2]
      local count = counts and counts[id]
      if not count then
        local pending = redis.call("XPENDING", stream, group, id, id, 1)[1]
        count = pending and pending[4] or 1
      end
      local err_field = "e:" .. group .. ":" .. id
      local err = redis.call("HGET", KEYS[4], err_field) or ""
      if count > max_deliveries then
        redis.call("LPUSH", KEYS[3], entry_envelope(id, fields, count - 1, err ~= "" and err or "not settled within min_idle"))
        redis.call("XACK", stream, group, id)
        redis.call("HDEL", KEYS[4], err_field, "f:" .. group .. ":" .. id)
        dead = dead + 1
      else
        out[#out + 1] = { id, count, err, fields }
      end
    end
  end
  -- Entries the calling instance just handed back (retry, a closed stream), by id (ARGV[7], comma-separated):
  -- each still parked and due is claimed now, however long the group's pending list is before it. One not
  -- due yet (a retry's wait), or taken meanwhile, is left to the reclaim below, as any other.
  local due, counts = {}, {}
  for id in string.gmatch(ARGV[7], "[^,]+") do
    if #due == max then break end
    local p = redis.call("XPENDING", stream, group, id, id, 1)[1]
    if p and p[2] == ARGV[8] and p[3] >= min_idle then
      due[#due + 1] = id
      counts[id] = p[4] + 1 -- the claim counts a delivery
    end
  end
  for from = 1, #due, 1000 do
    local ids = { unpack(due, from, math.min(#due, from + 999)) }
    local entries = redis.call("XCLAIM", stream, group, consumer, min_idle, unpack(ids))
    -- XCLAIM returns nothing for one trimmed from the stream.
    local got = {}
    for _, entry in ipairs(entries) do got[entry[1]] = true end
    for _, id in ipairs(ids) do
      if not got[id] then forget(id) end
    end
    reclaimed(entries, counts)
  end
  -- Then entries idle in anyone's pending list (a crashed worker's or instance's), from the cursor on.
  local cursor, taken = ARGV[6], 0
  if #due < max then
    local claimed = redis.call("XAUTOCLAIM", stream, group, consumer, min_idle, cursor, "COUNT", max - #due)
    cursor, taken = claimed[1], #claimed[2]
    -- XAUTOCLAIM names those trimmed from the stream.
    for _, id in ipairs(claimed[3] or {}) do forget(id) end
    reclaimed(claimed[2])
  end
  -- Entries were reclaimed: consumers left holding nothing and idle past min_idle (instances that
  -- crashed, whose consumer nobody retired) leave the group, so its consumers are the live ones.
  -- Deleting a consumer that holds nothing loses nothing: a live one is created again by its next read.
  if taken + #due > 0 then
    for _, c in ipairs(redis.call("XINFO", "CONSUMERS", stream, group)) do
      local info = {}
      for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
      if info["pending"] == 0 and info["idle"] >= min_idle and info["name"] ~= consumer then
        redis.call("XGROUP", "DELCONSUMER", stream, group, info["name"])
      end
    end
  end
  local wake = ""
  local room = max - #out
  if room > 0 then
    local read = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", room, "STREAMS", stream, ">")
    local entries = read and read[1][2] or {}
    -- A group moved back reads again an entry this call has just claimed: Redis restarts its count at 1,
    -- and the read is its delivery now (the claim's would be refused as superseded): the claim's goes.
    if #out > 0 and #entries > 0 then
      local again = {}
      for _, entry in ipairs(entries) do again[entry[1]] = true end
      local kept = {}
      for _, d in ipairs(out) do
        if not again[d[1]] then kept[#kept + 1] = d end
      end
      out = kept
    end
    for _, entry in ipairs(entries) do out[#out + 1] = { entry[1], 1, "", entry[2] } end
    if #entries < room then
      for _, g in ipairs(redis.call("XINFO", "GROUPS", stream)) do
        local info = {}
        for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
        if info["name"] == group then wake = info["last-delivered-id"] end
      end
    end
  end
  local first = 0
  if #out > 0 then first = redis.call("INCRBY", KEYS[2], #out) - #out + 1 end
  for i, d in ipairs(out) do redis.call("HSET", KEYS[4], "f:" .. group .. ":" .. d[1], first + i - 1) end
  local reply = { cursor, first, dead, wake, trimmed }
  for _, d in ipairs(out) do reply[#reply + 1] = d end
  return reply
end
