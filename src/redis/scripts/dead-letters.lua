--[[
  Requeues or deletes dead letters of one queue.
  KEYS[1] dead-letter list   KEYS[2] queue list
  KEYS[3] deliveries hash (a dead letter's count is its field "dead:<sha1>")
  ARGV[1] "requeue" | "delete"
  ARGV[2] "all": up to ARGV[3] dead letters, oldest first
          "values": the values ARGV[3..], one list entry each
  A requeued value is LPUSHed onto the queue (workers take it after what is
  already waiting) and starts over with no deliveries. Returns how many dead
  letters moved or went.
]]
local requeue = ARGV[1] == "requeue"
local done = 0
if ARGV[2] == "all" then
  local limit = tonumber(ARGV[3])
  if not requeue then
    local n = redis.call("LLEN", KEYS[1])
    if n <= limit then
      limit = n
    end
    for _, value in ipairs(redis.call("LRANGE", KEYS[1], n - limit, -1)) do
      redis.call("HDEL", KEYS[3], "dead:" .. redis.sha1hex(value))
    end
    if limit == n then
      if n > 0 then redis.call("DEL", KEYS[1]) end
    else
      redis.call("LTRIM", KEYS[1], 0, n - limit - 1)
    end
    return limit
  end
  -- Counted first: no command touches the list after it is empty.
  local n = math.min(redis.call("LLEN", KEYS[1]), limit)
  for _ = 1, n do
    redis.call("HDEL", KEYS[3], "dead:" .. redis.sha1hex(redis.call("LMOVE", KEYS[1], KEYS[2], "RIGHT", "LEFT")))
  end
  return n
end
for i = 3, #ARGV do
  if redis.call("LREM", KEYS[1], -1, ARGV[i]) == 1 then
    redis.call("HDEL", KEYS[3], "dead:" .. redis.sha1hex(ARGV[i]))
    if requeue then redis.call("LPUSH", KEYS[2], ARGV[i]) end
    done = done + 1
  end
end
return done
