--[[
  Settles deliveries of a STREAM queue, then leases for the credit they freed,
  in one call (one round trip where a stream's turn would take two):
  stream-settle.lua's work, then stream-lease.lua's. An entry a settle hands
  back (a retry due at once) is reclaimable when the lease runs: the lease
  takes the parking consumer's due entries first.
  KEYS[1] stream   KEYS[2] fence counter   KEYS[3] dead-letter list   KEYS[4] counts hash
  ARGV[1..5] as stream-settle.lua's (ARGV[5], the parking consumer, is stream-lease.lua's ARGV[8] too)
  ARGV[6..12] as stream-lease.lua's ARGV[1..7]
  ARGV[13..] stream-settle.lua's octuples
  Returns: { stream-settle.lua's answer, stream-lease.lua's answer }. A lease that
  fails once the settles applied (the group deleted meanwhile, say) leaves their
  answer standing: its error comes in place of stream-lease.lua's answer. Settles
  refused for a key of another type refuse the whole call, leasing nothing.
]]
local settled = stream_settle_all({ KEYS[1], KEYS[3], KEYS[4] }, ARGV, 13)
if settled.err then return settled end
local ok, leased = pcall(stream_lease, KEYS, { ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[5] })
if not ok then
  leased = redis.error_reply(type(leased) == "table" and leased.err or tostring(leased))
end
return { settled, leased }
