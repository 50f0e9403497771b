--[[
  Deletes a consumer of a stream's group once it holds no pending entry (an
  instance stopping): a consumer with entries stays, so none is forgotten.
  KEYS[1] stream   ARGV[1] group   ARGV[2] consumer
  Returns: 1 when deleted, 0 when it still holds entries (or the stream is gone).
]]
if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
if #redis.call("XPENDING", KEYS[1], ARGV[1], "-", "+", 1, ARGV[2]) > 0 then return 0 end
redis.call("XGROUP", "DELCONSUMER", KEYS[1], ARGV[1], ARGV[2])
return 1
