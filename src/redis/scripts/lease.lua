--[[
  Leases up to ARGV[2] items of a reliable queue: moves each from the queue into
  the processing list (LMOVE, the seed's move) and records the delivery: its
  lease, its delivery count and, with a recovery set, the claim time. All in
  one call, so no item is ever moved without its record.
  A lease record is "fence[,fence...]:value", keyed by the value's sha1: equal
  values pushed twice are two items, each with its own fence.
  KEYS[1] queue list      KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] deliveries hash KEYS[5] fence counter     KEYS[6] recovery zset (ignored when ARGV[3] ~= "1")
  ARGV[1] now (ms)   ARGV[2] max items   ARGV[3] "1" with a recovery set
  ARGV[4] recovery ttl (ms, 0: none)
  Returns: a flat array: value, sha1, fence, delivery count for each moved item.
  Never touches a key after emptying it: while a cluster slot migrates, a key
  that disappears mid-script is "non local" and the script would stop halfway,
  with items moved but never delivered. So it moves no more than LLEN items.
]]
local out = {}
local max = math.min(tonumber(ARGV[2]), redis.call("LLEN", KEYS[1]))
local recovery = ARGV[3] == "1"
for _ = 1, max do
  local value = redis.call("LMOVE", KEYS[1], KEYS[2], "RIGHT", "LEFT")
  local sha = redis.sha1hex(value)
  local fence = redis.call("INCR", KEYS[5])
  local count = redis.call("HINCRBY", KEYS[4], sha, 1)
  local held = redis.call("HGET", KEYS[3], sha)
  if held then
    -- An equal value is already out: this copy's count excludes the copies in flight.
    local fences = string.sub(held, 1, string.find(held, ":", 1, true) - 1)
    local _, commas = string.gsub(fences, ",", "")
    count = count - (commas + 1)
    redis.call("HSET", KEYS[3], sha, fences .. "," .. fence .. ":" .. value)
  else
    redis.call("HSET", KEYS[3], sha, fence .. ":" .. value)
  end
  if recovery then redis.call("ZADD", KEYS[6], ARGV[1], value) end
  out[#out + 1] = value
  out[#out + 1] = sha
  out[#out + 1] = fence
  out[#out + 1] = count
end
if recovery and #out > 0 and tonumber(ARGV[4]) > 0 then
  redis.call("PEXPIRE", KEYS[6], ARGV[4])
end
return out
