--[[
  Enqueues with a publish TTL: LPUSHes the values onto the queue list and
  resets the key's expiry (seed 000: every push resets it). Refuses, changing
  nothing, when the key holds something other than a list. (Without a TTL a
  plain LPUSH does the same, refusal included, at a fraction of the cost.)
  KEYS[1] queue list
  ARGV[1] ttl (ms, 0: leave the expiry alone)   ARGV[2..] values, oldest first
  Returns: the list's new length, or an error "SYWRONGTYPE <type>".
]]
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "list" and kind ~= "none" then
  return redis.error_reply("SYWRONGTYPE " .. kind)
end
-- Lua's unpack fails beyond ~8000 values ("too many results to unpack"), and one
-- Enqueue may carry 10,000: push in chunks, which leaves the same list as one LPUSH.
local CHUNK = 1000
local length
for first = 2, #ARGV, CHUNK do
  length = redis.call("LPUSH", KEYS[1], unpack(ARGV, first, math.min(first + CHUNK - 1, #ARGV)))
end
if tonumber(ARGV[1]) > 0 then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
return length
