--[[
  Enqueues items of which some wait for a time or carry an idempotency key,
  in their order: a ready item is LPUSHed onto the queue, a later one is added
  to the delayed set (the mover makes it ready when due, see promote.lua). An
  item whose key was used within the window is not added: its answer is the
  id of the item first enqueued with that key. Refuses, changing nothing,
  when the queue key holds something other than a list.
  KEYS[1] queue list   KEYS[2] delayed zset   KEYS[3] idempotency hash (key → id)
  KEYS[4] idempotency times zset (key → first use, ms)
  ARGV[1] now (ms)   ARGV[2] idempotency window (ms)   ARGV[3] publish ttl (ms, 0: none)
  ARGV[4..] quadruples, in order: id, stored value, due (ms; 0: now), idempotency key ("": none)
  Returns: one string per item: "" when it was added, else the first item's id;
  or an error "SYWRONGTYPE <type>".
]]
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "list" and kind ~= "none" then
  return redis.error_reply("SYWRONGTYPE " .. kind)
end
local now, window, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- Forget keys whose window passed: up to 100 more than this call may add, so the set stays
-- bounded by the keys of one window even when every call adds many.
local forget = 100 + (#ARGV - 3) / 4
for _, key in ipairs(redis.call("ZRANGEBYSCORE", KEYS[4], "-inf", now - window, "LIMIT", 0, forget)) do
  redis.call("ZREM", KEYS[4], key)
  redis.call("HDEL", KEYS[3], key)
end
local out, pushed = {}, false
for i = 4, #ARGV, 4 do
  local id, value, due, key = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local first
  if key ~= "" then
    local since = redis.call("ZSCORE", KEYS[4], key)
    if since and tonumber(since) > now - window then first = redis.call("HGET", KEYS[3], key) end
  end
  if first then
    out[#out + 1] = first
  else
    if key ~= "" then
      redis.call("HSET", KEYS[3], key, id)
      redis.call("ZADD", KEYS[4], now, key)
    end
    if due > now then
      redis.call("ZADD", KEYS[2], due, value)
    else
      redis.call("LPUSH", KEYS[1], value)
      pushed = true
    end
    out[#out + 1] = ""
  end
end
if pushed and ttl > 0 then redis.call("PEXPIRE", KEYS[1], ttl) end
return out
