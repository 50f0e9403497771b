#!lua flags=allow-oom
--[[
  Settles deliveries of a reliable queue, then leases for the credit they freed,
  in one call (one round trip where a stream's turn would take two): settle.lua's
  work, then lease.lua's.
  KEYS as settle.lua's (lease.lua's are its first five).
  ARGV[1..6] as settle.lua's   ARGV[7] max items to lease   ARGV[8] recovery ttl (ms, 0: none)
  ARGV[9] owner: the leasing instance's id   ARGV[10..] settle.lua's quadruples
  Returns: { settle.lua's answer, lease.lua's answer }. A settle refused for a
  key of another type refuses the whole call, changing nothing (leasing nothing).
  A lease that fails once the settles applied (the queue key of another type)
  leaves their answer standing: its error comes in place of lease.lua's answer.
  Runs when Redis is out of memory (allow-oom), as lease.lua does: settles free
  memory, and leasing is how a full Redis drains.
]]
local settled = settle_all(KEYS, ARGV, 10)
if settled.err then return settled end
-- The settles have applied: whatever befalls the lease (a queue key of another type), their answer goes
-- back, and the lease's error beside it in place of its items.
local ok, leased = pcall(lease_items, KEYS, { ARGV[1], ARGV[7], ARGV[3], ARGV[8], ARGV[9] })
if not ok then
  leased = redis.error_reply(type(leased) == "table" and leased.err or tostring(leased))
end
return { settled, leased }
