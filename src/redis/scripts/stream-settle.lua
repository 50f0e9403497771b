--[[
  Settles deliveries of a STREAM queue. A delivery is live while its entry is
  pending in its group for the consumer that leased it with the same delivery
  count and fence (fencing: once the entry was reclaimed, handed back, or
  delivered again after its group moved or was created again, the old token
  is refused). Handing an entry back moves it to the parking consumer with an
  idle time that lets the next XAUTOCLAIM (stream-lease.lua) take it at once,
  or after the retry's wait; that claim counts the next delivery.
  KEYS[1] stream   KEYS[2] dead-letter list   KEYS[3] counts hash
  ARGV[1] max deliveries   ARGV[2] min idle (ms)   ARGV[3] retry policy
  ARGV[4] a random number in [0, 1)   ARGV[5] the parking consumer
  ARGV[6..] octuples: action, group, id, delivery count, consumer, fence, reason, delay ("" : the policy's). Actions:
    a ack, d drop: XACK        r retry: back after the wait, or dead-lettered at max deliveries
    b back: at once (its stream closed; the next delivery counts)
    u undo: at once, uncounted (it never reached a worker)
    k kill: to the dead letters at once with its reason (it fits no delivery message)
    x extend: XCLAIM to the same consumer (idle restarts)   c check: change nothing
  Returns: a flat array, two numbers per settle: a code (1 done, 2 dead-lettered,
    -1 not held: acked already, -2 superseded: reclaimed or handed back since) and,
    for a retry that applied, its wait in ms.
]]
local stream = KEYS[1]
local max, min_idle, policy, seed, park = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local out = {}
for i = 6, #ARGV, 8 do
  local action, group, id, count, consumer, fence, reason, delay =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  -- A group or stream deleted since (or a token naming neither) holds nothing.
  local read = redis.pcall("XPENDING", stream, group, id, id, 1)
  local pending = type(read) == "table" and not read.err and read[1]
  local code, wait = 1, 0
  local err_field, fence_field = "e:" .. group .. ":" .. id, "f:" .. group .. ":" .. id
  if not pending then code = -1
  elseif pending[2] ~= consumer or pending[4] ~= count or redis.call("HGET", KEYS[3], fence_field) ~= fence then code = -2
  elseif action == "a" or action == "d" then
    redis.call("XACK", stream, group, id)
    redis.call("HINCRBY", KEYS[3], "completed", 1)
    redis.call("HDEL", KEYS[3], err_field, fence_field)
  elseif action == "x" then
    redis.call("XCLAIM", stream, group, consumer, 0, id, "JUSTID")
  elseif action == "k" or (action == "r" and count >= max) then
    -- An entry trimmed from the stream while pending has nothing left to dead-letter: it is only acked.
    local entry = redis.call("XRANGE", stream, id, id)[1]
    if entry then
      redis.call("LPUSH", KEYS[2], entry_envelope(id, entry[2], count, reason))
      code = 2
    end
    redis.call("XACK", stream, group, id)
    redis.call("HDEL", KEYS[3], err_field, fence_field)
  elseif action == "r" then
    wait = delay == "" and backoff(policy, count, nth_random(seed, i)) or tonumber(delay)
    if wait > min_idle then wait = min_idle end
    if reason ~= "" then redis.call("HSET", KEYS[3], err_field, reason) end
    redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle - wait, "JUSTID")
  elseif action == "b" then
    redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle, "JUSTID")
  elseif action == "u" then
    redis.call("XCLAIM", stream, group, park, 0, id, "IDLE", min_idle, "RETRYCOUNT", count - 1, "JUSTID")
  end
  out[#out + 1] = code
  out[#out + 1] = wait
end
return out
