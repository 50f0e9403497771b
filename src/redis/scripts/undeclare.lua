--[[
  Removes a queue declaration and its keys' ownership, and announces it with a
  new version: every change of a declaration takes the next number of one counter,
  so an instance that hears of a change after it made a newer one itself (events
  and answers come on different connections) can tell the event is old news.
  KEYS[1] declarations hash   KEYS[2] key owners hash   KEYS[3] version counter
  ARGV[1] name   ARGV[2] channel to announce on   ARGV[3] the incarnation to remove
  ("" for a declaration stored without one)   ARGV[4..] the queue's keys
  Returns: the change's version when it was declared (as that incarnation), 0 when not:
  a delete that read the declaration before it was deleted and declared again
  removes nothing of the new one, whose keys may be others.
]]
local stored = redis.call("HGET", KEYS[1], ARGV[1])
if not stored then return 0 end
local ok, decoded = pcall(cjson.decode, stored)
local incarnation = ok and type(decoded) == "table" and type(decoded.incarnation) == "string" and decoded.incarnation or ""
if incarnation ~= ARGV[3] then return 0 end
redis.call("HDEL", KEYS[1], ARGV[1])
for i = 4, #ARGV do
  if redis.call("HGET", KEYS[2], ARGV[i]) == ARGV[1] then redis.call("HDEL", KEYS[2], ARGV[i]) end
end
local version = redis.call("INCR", KEYS[3])
redis.call("PUBLISH", ARGV[2], cjson.encode({ op = "delete", name = ARGV[1], version = version }))
return version
