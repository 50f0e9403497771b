--[[
  Removes a queue declaration and its keys' ownership, and announces it.
  KEYS[1] declarations hash   KEYS[2] key owners hash
  ARGV[1] name   ARGV[2] channel to announce on   ARGV[3..] the queue's keys
  Returns: 1 when it was declared, 0 when not.
]]
if redis.call("HDEL", KEYS[1], ARGV[1]) == 0 then return 0 end
for i = 3, #ARGV do
  if redis.call("HGET", KEYS[2], ARGV[i]) == ARGV[1] then redis.call("HDEL", KEYS[2], ARGV[i]) end
end
redis.call("PUBLISH", ARGV[2], cjson.encode({ op = "delete", name = ARGV[1] }))
return 1
