--[[
  Moves the items of a delayed set that are due onto their queue, earliest
  first, each at the back (LPUSH), as one atomic step: of instances doing this
  at once, each item moves exactly once.
  KEYS[1] delayed zset   KEYS[2] queue list
  ARGV[1] now (ms)   ARGV[2] most items to move   ARGV[3] publish ttl of the queue (ms, 0: none)
  Returns: { items moved, when the next item is due (0: none left) }; or an
  error "SYWRONGTYPE ..." (moving nothing) when the queue key is not a list.
]]
local size = redis.call("ZCARD", KEYS[1])
if size == 0 then return { 0, 0 } end
-- Before any write (an error mid-script keeps the writes before it: the items taken out would be lost).
local kind = redis.call("TYPE", KEYS[2]).ok
if kind ~= "list" and kind ~= "none" then return redis.error_reply("SYWRONGTYPE " .. kind .. " list " .. KEYS[2]) end
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
if #due > 0 then
  -- The due items are the set's lowest ranks: one range removal, and one LPUSH (in
  -- their order, as one LPUSH each would) instead of two commands per item.
  redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #due - 1)
  redis.call("LPUSH", KEYS[2], unpack(due))
end
if #due > 0 and tonumber(ARGV[3]) > 0 then redis.call("PEXPIRE", KEYS[2], ARGV[3]) end
if #due == size then return { #due, 0 } end
local next = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
return { #due, tonumber(next[2]) }
