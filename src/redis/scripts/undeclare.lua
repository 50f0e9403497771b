--[[
  Removes a queue declaration and its keys' ownership, and announces it with a
  new version: every change of a declaration takes the next number of one counter,
  so an instance that hears of a change after it made a newer one itself (events
  and answers come on different connections) can tell the event is old news.
  KEYS[1] declarations hash   KEYS[2] key owners hash   KEYS[3] version counter
  ARGV[1] name   ARGV[2] channel to announce on   ARGV[3..] the queue's keys
  Returns: the change's version when it was declared, 0 when not.
]]
if redis.call("HDEL", KEYS[1], ARGV[1]) == 0 then return 0 end
for i = 3, #ARGV do
  if redis.call("HGET", KEYS[2], ARGV[i]) == ARGV[1] then redis.call("HDEL", KEYS[2], ARGV[i]) end
end
local version = redis.call("INCR", KEYS[3])
redis.call("PUBLISH", ARGV[2], cjson.encode({ op = "delete", name = ARGV[1], version = version }))
return version
