--[[
  Takes up to ARGV[1] items of a simple queue (RPOP: at most once) and numbers
  them from the queue's fence counter, in one call. The numbers are taken
  first: if that fails (a fence key someone overwrote), nothing is popped, so
  no item can ever leave the queue without reaching a stream.
  KEYS[1] queue list   KEYS[2] fence counter (in the queue's slot)
  ARGV[1] max items
  Returns: { first fence, values... } (just { 0 } when the queue is empty).
]]
local n = math.min(tonumber(ARGV[1]), redis.call("LLEN", KEYS[1]))
if n <= 0 then return { 0 } end
local first = redis.call("INCRBY", KEYS[2], n) - n + 1
local values = redis.call("RPOP", KEYS[1], n)
table.insert(values, 1, first)
return values
