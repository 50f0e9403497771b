--[[
  Gives a claim record to every item in a slice of the processing list that has
  none (a raw BLMOVE by another client, or a second copy of an equal value), so
  the watchdog recovers it min_idle later.
  KEYS[1] processing list   KEYS[2] recovery zset
  ARGV[1] now (ms)   ARGV[2] first index   ARGV[3] last index
  Returns: { claims added, length of the processing list }.
]]
local added = 0
local counts = {}
for _, value in ipairs(redis.call("LRANGE", KEYS[1], ARGV[2], ARGV[3])) do
  counts[value] = (counts[value] or 0) + 1
  if counts[value] == 1 and not redis.call("ZSCORE", KEYS[2], value) then
    redis.call("ZADD", KEYS[2], ARGV[1], value)
    added = added + 1
  end
end
return { added, redis.call("LLEN", KEYS[1]) }
