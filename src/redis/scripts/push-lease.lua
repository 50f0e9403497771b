#!lua
--[[
  Pushes values onto a reliable queue, then leases up to ARGV[3] items of it,
  in one call (one round trip where an item pushed onto an empty queue would
  take two): push_values (push-values.lua), then lease.lua's work.
  KEYS as lease.lua's (KEYS[1] the queue list).
  ARGV[1] ttl (ms, 0: leave the expiry alone)   ARGV[2] now (ms)   ARGV[3] max items
  ARGV[4] "1" with a recovery set   ARGV[5] recovery ttl (ms, 0: none)
  ARGV[6] owner: the leasing instance's id   ARGV[7..] values, oldest first
  Returns: { the list's new length, lease.lua's answer }, or an error
  "SYWRONGTYPE <type>" when the queue key holds something other than a list
  (nothing written). A lease that fails once the push is written (a key of
  lease.lua's of another type) leaves the push standing: its error comes in
  place of lease.lua's answer.
  Not allow-oom: when Redis is out of memory the call is refused whole, as an
  LPUSH would be; the pump then leases with lease.lua, which may run.
]]
local length, refused = push_values(KEYS[1], ARGV[1], ARGV, 7)
if refused then return redis.error_reply(refused) end
local ok, leased = pcall(lease_items, KEYS, { ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] }, length)
if not ok then
  leased = redis.error_reply(type(leased) == "table" and leased.err or tostring(leased))
end
return { length, leased }
