--[[
  Gives a delivery (owner "-", no instance) and a claim to every item in the
  processing list that no live delivery accounts for (a raw BLMOVE by another
  client, or items from before this record format), so the watchdog recovers
  it min_idle later. Does nothing while the list holds no more items than
  live deliveries (the usual case: one HGET and one LLEN).
  KEYS[1] processing list   KEYS[2] leases hash   KEYS[3] fence counter   KEYS[4] recovery zset
  ARGV[1] now (ms)   ARGV[2] the most items to read
  Returns: { deliveries added, length of the processing list }.
]]
local length = redis.call("LLEN", KEYS[1])
local live = tonumber(redis.call("HGET", KEYS[2], "live") or "0")
if length <= live then return { 0, length } end
local seen = {}
for _, value in ipairs(redis.call("LRANGE", KEYS[1], 0, tonumber(ARGV[2]) - 1)) do
  seen[value] = (seen[value] or 0) + 1
end
local added = 0
for value, copies in pairs(seen) do
  local sha = redis.sha1hex(value)
  local known = math.floor(tonumber(redis.call("HGET", KEYS[2], "n:" .. sha)) or 0)
  for _ = known + 1, copies do
    local fence = redis.call("INCR", KEYS[3])
    local field = delivery_field(fence, "-")
    local plain = not derived(value)
    local kind = (plain and redis.call("HSETNX", KEYS[2], "m:" .. sha, field) == 1) and "v" or "d"
    count_value(KEYS[2], sha)
    redis.call("ZADD", KEYS[4], ARGV[1], claim_member(kind, value, field))
    redis.call("HSET", KEYS[2], field, kind .. ":" .. value)
    added = added + 1
  end
end
if added > 0 then redis.call("HINCRBY", KEYS[2], "live", added) end
return { added, length }
