--[[
  Deletes a consumer group of a STREAM queue with its records in the counts
  hash: a pending entry's delivery number ("f:<group>:<id>") and last error
  ("e:<group>:<id>"), which only its settle would have removed. A call takes at
  most ARGV[2] pending entries: it deletes their records and acks them (the
  group is going), and the call that finds fewer destroys the group, so no
  record is made between the last look and the destroy.
  KEYS[1] stream   KEYS[2] counts hash   ARGV[1] group   ARGV[2] entries per call
  ARGV[3] "drop": also delete the stream key if the destroy leaves it with no entry and no group
  (a key a restore made for a queue deleted meanwhile)
  Returns: 1 when the group is gone (or was: the stream or group does not exist), 0 when a call more is
  needed; WRONGTYPE when the stream key is not a stream, SYWRONGTYPE (lib.lua wrong_type) when the counts
  hash is not a hash.
]]
if redis.call("EXISTS", KEYS[1]) == 0 then return 1 end
local refused = wrong_type({ KEYS[2], "hash" })
if refused then return refused end
local group, max = ARGV[1], tonumber(ARGV[2])
local pending = redis.pcall("XPENDING", KEYS[1], group, "-", "+", max)
-- The stream key of another type: WRONGTYPE, as XGROUP DESTROY would say; no such group: nothing to delete.
if pending.err then return string.sub(pending.err, 1, 9) == "WRONGTYPE" and pending or 1 end
local fields, ids = {}, {}
for _, p in ipairs(pending) do
  ids[#ids + 1] = p[1]
  fields[#fields + 1] = "f:" .. group .. ":" .. p[1]
  fields[#fields + 1] = "e:" .. group .. ":" .. p[1]
end
if #fields > 0 then redis.call("HDEL", KEYS[2], unpack(fields)) end
if #pending < max then
  redis.call("XGROUP", "DESTROY", KEYS[1], group)
  if ARGV[3] == "drop" and redis.call("XLEN", KEYS[1]) == 0 and #redis.call("XINFO", "GROUPS", KEYS[1]) == 0 then
    redis.call("DEL", KEYS[1])
  end
  return 1
end
redis.call("XACK", KEYS[1], group, unpack(ids))
return 0
