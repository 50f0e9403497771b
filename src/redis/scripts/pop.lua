--[[
  Takes up to ARGV[1] items of a simple queue (RPOP: at most once) and numbers
  them from the queue's fence counter, in one call, so a failure can never
  leave items popped without their numbers.
  KEYS[1] queue list   KEYS[2] fence counter (in the queue's slot)
  ARGV[1] max items
  Returns: { first fence, values... } (just { 0 } when the queue is empty).
]]
local values = redis.call("RPOP", KEYS[1], ARGV[1])
if not values then return { 0 } end
local first = redis.call("INCRBY", KEYS[2], #values) - #values + 1
table.insert(values, 1, first)
return values
