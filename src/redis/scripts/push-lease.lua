#!lua
--[[
  Pushes values onto a reliable queue, then leases up to ARGV[3] items of it,
  in one call (one round trip where an item pushed onto an empty queue would
  take two): push.lua's work, then lease.lua's.
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
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "list" and kind ~= "none" then
  return redis.error_reply("SYWRONGTYPE " .. kind)
end
-- Lua's unpack fails beyond ~8000 values: push in chunks, which leaves the same list as one LPUSH.
local CHUNK = 1000
local length
for first = 7, #ARGV, CHUNK do
  length = redis.call("LPUSH", KEYS[1], unpack(ARGV, first, math.min(first + CHUNK - 1, #ARGV)))
end
if tonumber(ARGV[1]) > 0 then redis.call("PEXPIRE", KEYS[1], ARGV[1]) end
local ok, leased = pcall(lease_items, KEYS, { ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] })
if not ok then
  leased = redis.error_reply(type(leased) == "table" and leased.err or tostring(leased))
end
return { length, leased }
