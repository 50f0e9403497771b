--[[
  The watchdog: returns every claim idle longer than min_idle to the front of
  the queue (or to the dead-letter list once it used up its deliveries), and
  invalidates its lease so the stalled worker's late settle is refused. Of
  equal values in flight, the oldest lease goes; the sweep gives the next copy
  a claim of its own.
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] deliveries hash (a dead letter's count goes to field "dead:<sha1>")
  KEYS[5] recovery zset   KEYS[6] dead-letter list
  ARGV[1] now (ms)   ARGV[2] min idle (ms)   ARGV[3] max claims this call
  ARGV[4] max deliveries
  Returns: { recovered, dead-lettered, stale claims seen }.
  Never touches a key once it is empty (the counts below follow the processing
  list, leases and deliveries): while a cluster slot migrates, a key that
  disappears mid-script is "non local", and the script would stop halfway.
]]
local stale = redis.call("ZRANGEBYSCORE", KEYS[5], "-inf", tonumber(ARGV[1]) - tonumber(ARGV[2]),
  "LIMIT", 0, tonumber(ARGV[3]))
local max = tonumber(ARGV[4])
local processing = redis.call("LLEN", KEYS[2])
local leases = redis.call("HLEN", KEYS[3])
local counted = redis.call("HLEN", KEYS[4])
local recovered, dead = 0, 0
for _, value in ipairs(stale) do
  redis.call("ZREM", KEYS[5], value)
  if processing > 0 and redis.call("LREM", KEYS[2], -1, value) > 0 then
    processing = processing - 1
    local sha = redis.sha1hex(value)
    local others = 0
    local lease = leases > 0 and redis.call("HGET", KEYS[3], sha)
    if lease then
      local fences = string.sub(lease, 1, string.find(lease, ":", 1, true) - 1)
      local comma = string.find(fences, ",", 1, true)
      if comma then
        local _, commas = string.gsub(fences, ",", "")
        others = commas
        redis.call("HSET", KEYS[3], sha, string.sub(lease, comma + 1))
      else
        redis.call("HDEL", KEYS[3], sha)
        leases = leases - 1
      end
    end
    local count = tonumber(counted > 0 and redis.call("HGET", KEYS[4], sha) or "0") - others
    if max > 0 and count >= max then
      -- Recorded first, so the hash does not empty before it.
      counted = counted + redis.call("HSET", KEYS[4], "dead:" .. sha, count)
      if others == 0 then
        counted = counted - redis.call("HDEL", KEYS[4], sha)
      else
        redis.call("HSET", KEYS[4], sha, others)
      end
      redis.call("LPUSH", KEYS[6], value)
      dead = dead + 1
    else
      redis.call("RPUSH", KEYS[1], value)
      recovered = recovered + 1
    end
  end
end
return { recovered, dead, #stale }
