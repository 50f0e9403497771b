#!lua flags=allow-oom
--[[
  Leases up to ARGV[2] items of a reliable queue: moves each from the queue
  into the processing list (LMOVE, the seed's move) and records its delivery
  (see lib.lua): the record under "<fence>@<owner>", and with a recovery set
  the claim, scored with the claim time. All in one call, so no item is ever
  moved without its record.
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] fence counter   KEYS[5] recovery zset (ignored when ARGV[3] ~= "1")
  ARGV[1] now (ms)   ARGV[2] max items   ARGV[3] "1" with a recovery set
  ARGV[4] recovery ttl (ms, 0: none)   ARGV[5] owner: the leasing instance's id
  Returns: a flat array: value and fence of each moved item (its delivery
  count is its history's deliveries plus one, read by the caller).
  Runs when Redis is out of memory (allow-oom): moving an item takes next to
  no memory, and leasing is how a full Redis drains.
  Moves no more than LLEN items: it never touches the queue once it is empty
  (while a cluster slot migrates, a key that disappears mid-script is "non
  local" and the script would stop halfway, with items moved but never delivered).
]]
local max = math.min(tonumber(ARGV[2]), redis.call("LLEN", KEYS[1]))
if max <= 0 then return {} end
local recovery = ARGV[3] == "1"
local owner = ARGV[5]
local out = {}
for _ = 1, max do
  local value = redis.call("LMOVE", KEYS[1], KEYS[2], "RIGHT", "LEFT")
  local fence = redis.call("INCR", KEYS[4])
  local field = fence .. "@" .. owner
  local kind = "-"
  if recovery then
    local sha = redis.sha1hex(value)
    -- The first live delivery of a value claims under the value itself (the seed's record);
    -- an equal value leased meanwhile gets a member of its own, so each delivery has its claim.
    -- (A value that looks like a derived member never claims under itself.)
    local plain = string.sub(value, 1, #DERIVED) ~= DERIVED
    if plain and redis.call("HSETNX", KEYS[3], "m:" .. sha, field) == 1 then kind = "v" else kind = "d" end
    redis.call("HINCRBY", KEYS[3], "n:" .. sha, 1)
    redis.call("ZADD", KEYS[5], ARGV[1], claim_member(kind, value, field))
  end
  redis.call("HSET", KEYS[3], field, kind .. ":" .. value)
  out[#out + 1] = value
  out[#out + 1] = fence
end
redis.call("HINCRBY", KEYS[3], "live", max)
if recovery and tonumber(ARGV[4]) > 0 then redis.call("PEXPIRE", KEYS[5], ARGV[4]) end
return out
