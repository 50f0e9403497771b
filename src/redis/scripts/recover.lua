--[[
  The watchdog: returns every claim idle longer than min_idle to the front of
  the queue (or to the dead-letter list once it used up its deliveries), and
  invalidates its lease so the stalled worker's late settle is refused.
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] deliveries hash   KEYS[5] recovery zset   KEYS[6] dead-letter list
  ARGV[1] now (ms)   ARGV[2] min idle (ms)   ARGV[3] max claims this call
  ARGV[4] max deliveries
  Returns: { recovered, dead-lettered, stale claims seen }.
]]
local stale = redis.call("ZRANGEBYSCORE", KEYS[5], "-inf", tonumber(ARGV[1]) - tonumber(ARGV[2]),
  "LIMIT", 0, tonumber(ARGV[3]))
local max = tonumber(ARGV[4])
local recovered, dead = 0, 0
for _, value in ipairs(stale) do
  redis.call("ZREM", KEYS[5], value)
  if redis.call("LREM", KEYS[2], -1, value) > 0 then
    local sha = redis.sha1hex(value)
    redis.call("HDEL", KEYS[3], sha)
    if max > 0 and tonumber(redis.call("HGET", KEYS[4], sha) or "0") >= max then
      redis.call("HDEL", KEYS[4], sha)
      redis.call("LPUSH", KEYS[6], value)
      dead = dead + 1
    else
      redis.call("RPUSH", KEYS[1], value)
      recovered = recovered + 1
    end
  end
end
return { recovered, dead, #stale }
