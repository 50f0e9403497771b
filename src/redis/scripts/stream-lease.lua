--[[
  Delivers entries of a STREAM queue to one consumer of a group, in one call:
  first entries idle in the group's pending list longer than min_idle
  (XAUTOCLAIM, which counts another delivery), sending those past max
  deliveries to the dead-letter list (acked there); then new entries
  (XREADGROUP ">"). Each delivery is numbered from the queue's fence counter,
  and its number kept in the counts hash ("f:<group>:<id>") for settles to
  check: an entry delivered again by XREADGROUP after its group was moved back
  or created again has its delivery count reset to 1 by Redis, so the count
  alone would let the earlier delivery's token settle the new one.
  KEYS[1] stream   KEYS[2] fence counter   KEYS[3] dead-letter list   KEYS[4] counts hash
  ARGV[1] group   ARGV[2] consumer   ARGV[3] max entries   ARGV[4] min idle (ms)
  ARGV[5] max deliveries   ARGV[6] XAUTOCLAIM cursor
  Returns: { next cursor, first fence, dead-lettered, wake id, deliveries... }, each
    delivery { id, delivery count, last error, { field, value, ... } }. The wake id
    is the group's last delivered id when it read fewer new entries than it could
    (an XREAD after it wakes once there is more), else "".
]]
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local max, min_idle, max_deliveries = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out, dead = {}, 0
local claimed = redis.call("XAUTOCLAIM", stream, group, consumer, min_idle, ARGV[6], "COUNT", max)
local cursor = claimed[1]
-- Entries trimmed from the stream while pending: XAUTOCLAIM took them out of the pending list.
for _, id in ipairs(claimed[3] or {}) do redis.call("HDEL", KEYS[4], "e:" .. group .. ":" .. id, "f:" .. group .. ":" .. id) end
for _, entry in ipairs(claimed[2]) do
  local id, fields = entry[1], entry[2]
  local pending = redis.call("XPENDING", stream, group, id, id, 1)[1]
  local count = pending and pending[4] or 1
  local err_field = "e:" .. group .. ":" .. id
  local err = redis.call("HGET", KEYS[4], err_field) or ""
  if count > max_deliveries then
    redis.call("LPUSH", KEYS[3], entry_envelope(id, fields, count - 1, err ~= "" and err or "not settled within min_idle"))
    redis.call("XACK", stream, group, id)
    redis.call("HDEL", KEYS[4], err_field, "f:" .. group .. ":" .. id)
    dead = dead + 1
  else
    out[#out + 1] = { id, count, err, fields }
  end
end
-- Entries were reclaimed: consumers left holding nothing and idle past min_idle (instances that
-- crashed, whose consumer nobody retired) leave the group, so its consumers are the live ones.
-- Deleting a consumer that holds nothing loses nothing: a live one is created again by its next read.
if #claimed[2] > 0 then
  for _, c in ipairs(redis.call("XINFO", "CONSUMERS", stream, group)) do
    local info = {}
    for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
    if info["pending"] == 0 and info["idle"] >= min_idle and info["name"] ~= consumer then
      redis.call("XGROUP", "DELCONSUMER", stream, group, info["name"])
    end
  end
end
local wake = ""
local room = max - #out
if room > 0 then
  local read = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", room, "STREAMS", stream, ">")
  local entries = read and read[1][2] or {}
  for _, entry in ipairs(entries) do out[#out + 1] = { entry[1], 1, "", entry[2] } end
  if #entries < room then
    for _, g in ipairs(redis.call("XINFO", "GROUPS", stream)) do
      local info = {}
      for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
      if info["name"] == group then wake = info["last-delivered-id"] end
    end
  end
end
local first = 0
if #out > 0 then first = redis.call("INCRBY", KEYS[2], #out) - #out + 1 end
for i, d in ipairs(out) do redis.call("HSET", KEYS[4], "f:" .. group .. ":" .. d[1], first + i - 1) end
local reply = { cursor, first, dead, wake }
for _, d in ipairs(out) do reply[#reply + 1] = d end
return reply
