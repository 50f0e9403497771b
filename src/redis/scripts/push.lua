--[[
  Enqueues with a publish TTL: push_values (push-values.lua) onto the queue
  list. (Without a TTL a plain LPUSH does the same, refusal included, at a
  fraction of the cost.)
  KEYS[1] queue list
  ARGV[1] ttl (ms, 0: leave the expiry alone)   ARGV[2..] values, oldest first
  Returns: the list's new length, or an error "SYWRONGTYPE <type>".
]]
local length, refused = push_values(KEYS[1], ARGV[1], ARGV, 2)
if refused then return redis.error_reply(refused) end
return length
