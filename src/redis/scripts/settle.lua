--[[
  Settles deliveries of a reliable queue. Each settle names a delivery by the
  item's sha1 and the fence it was leased with, and applies only if that
  delivery still holds the item (fencing: a late settle from a stalled worker
  never touches the copy another worker now holds).
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] deliveries hash   KEYS[5] fence counter   KEYS[6] recovery zset (ignored when ARGV[3] ~= "1")
  KEYS[7] dead-letter list
  The deliveries hash also counts acks and drops ("completed") and keeps a
  dead letter's count ("dead:<sha1>") for PeekQueue.
  ARGV[1] now (ms)   ARGV[2] max deliveries   ARGV[3] "1" with a recovery set
  ARGV[4..] triples: action, sha1, fence. Actions:
    a ack: remove the item          d drop: remove the item
    r retry: back of the queue      b back: front of the queue (stream closed)
    u undo: front of the queue, and the delivery is not counted (never reached a worker)
    x extend: restart the claim     c check: change nothing
  Returns: one code per settle: 1 done, 2 dead-lettered (r, b),
    -1 not held (settled or recovered since), -2 superseded (leased again),
    -3 unknown (no such fence was ever issued).
  Never touches a key once it is empty (the counts below follow the leases,
  the processing list and the claims): while a cluster slot migrates, a key
  that disappears mid-script is "non local", and the script would stop halfway
  through its batch. (A settle that holds its item finds its delivery count.)
]]
local max = tonumber(ARGV[2])
local issued = tonumber(redis.call("GET", KEYS[5]) or "0")
local live = redis.call("HLEN", KEYS[3])
local pending = redis.call("LLEN", KEYS[2])
local claims = ARGV[3] == "1" and redis.call("ZCARD", KEYS[6]) or 0

-- Splits a lease record "f1,f2:value" into its fences and value.
local function parse(lease)
  local sep = string.find(lease, ":", 1, true)
  local fences = {}
  for f in string.gmatch(string.sub(lease, 1, sep - 1), "[^,]+") do fences[#fences + 1] = f end
  return fences, string.sub(lease, sep + 1)
end

local out = {}
for i = 4, #ARGV, 3 do
  local action, sha, fence = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local lease = live > 0 and redis.call("HGET", KEYS[3], sha)
  local code
  if tonumber(fence) < 1 or tonumber(fence) > issued then
    code = -3
  elseif not lease then
    code = -1
  else
    local fences, value = parse(lease)
    local at
    for j, f in ipairs(fences) do
      if f == fence then at = j end
    end
    if not at then
      code = -2
    elseif action == "c" then
      code = 1
    elseif action == "x" then
      if claims > 0 then redis.call("ZADD", KEYS[6], "XX", ARGV[1], value) end
      code = 1
    else
      table.remove(fences, at)
      local others = #fences
      if others == 0 then
        redis.call("HDEL", KEYS[3], sha)
        live = live - 1
        if claims > 0 then claims = claims - redis.call("ZREM", KEYS[6], value) end
      else
        redis.call("HSET", KEYS[3], sha, table.concat(fences, ",") .. ":" .. value)
      end
      if pending > 0 then pending = pending - redis.call("LREM", KEYS[2], -1, value) end
      code = 1
      -- This copy's deliveries: the value's count less one for each other copy still out.
      local count = tonumber(redis.call("HGET", KEYS[4], sha) or "0") - others
      local function forget()
        if others == 0 then redis.call("HDEL", KEYS[4], sha) else redis.call("HSET", KEYS[4], sha, others) end
      end
      if action == "a" or action == "d" then
        -- Counted before forget(): the "completed" field keeps the hash from emptying mid-script.
        redis.call("HINCRBY", KEYS[4], "completed", 1)
        forget()
      elseif action == "u" then
        redis.call("HINCRBY", KEYS[4], sha, -1)
        redis.call("RPUSH", KEYS[1], value)
      elseif max > 0 and count >= max then
        redis.call("HSET", KEYS[4], "dead:" .. sha, count) -- before forget(): the hash never empties mid-script
        forget()
        redis.call("LPUSH", KEYS[7], value)
        code = 2
      elseif action == "r" then
        redis.call("LPUSH", KEYS[1], value)
      else
        redis.call("RPUSH", KEYS[1], value)
      end
    end
  end
  out[#out + 1] = code
end
return out
