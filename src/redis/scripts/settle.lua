--[[
  Settles deliveries of a reliable queue. Each settle names a delivery by its
  field "<fence>@<owner>" (see lib.lua) and applies only while that delivery
  is live (fencing: a late settle from a stalled worker never touches the copy
  another worker now holds).
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] fence counter   KEYS[5] recovery zset (ignored when ARGV[3] ~= "1")
  KEYS[6] dead-letter list   KEYS[7] delayed zset   KEYS[8] tombstones zset
  ARGV[1] now (ms)   ARGV[2] max deliveries   ARGV[3] "1" with a recovery set
  ARGV[4] retry policy "initial,multiplier,max,jitter"   ARGV[5] a random number in [0, 1)
  ARGV[6] publish ttl of the queue (ms, 0: none)
  ARGV[7..] quadruples: action, field, reason, delay ("" for the policy's, else ms). Actions:
    a ack: remove the item          d drop: remove the item
    r retry: after the delay, or at the back of the queue
    b back: the front of the queue (its stream closed); the delivery counts
    u undo: the front of the queue as it was (it never reached a worker)
    k kill: to the dead letters with the reason (it can never be delivered)
    x extend: restart the claim     c check: change nothing
  Returns: a flat array, two numbers per settle: a code (1 done, 2 dead-lettered,
    -1 not held: settled already, -2 superseded: returned or recovered since,
    -3 unknown: no such fence was ever issued) and, for a retry that applied,
    when the item is due (0: at once). Or, changing nothing, an error
    "SYWRONGTYPE ..." when a settle would put an item back into a key of another type.
]]
local now, max = tonumber(ARGV[1]), tonumber(ARGV[2])
local recovery = ARGV[3] == "1"
local policy, seed, ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local k = queue_context({
  queue = KEYS[1], processing = KEYS[2], leases = KEYS[3], recovery = KEYS[5],
  dead = KEYS[6], delayed = KEYS[7], returned = KEYS[8],
}, recovery)
-- Settles that put an item back need the keys they may write to be of their types (see
-- wrong_type): a retry or return the queue, delayed set or dead letters, a kill the dead letters.
local checks = {}
for i = 7, #ARGV, 4 do
  local action = ARGV[i]
  if action == "r" or action == "b" or action == "u" then
    checks = { KEYS[1], "list", KEYS[7], "zset", KEYS[6], "list" }
    break
  elseif action == "k" then
    checks = { KEYS[6], "list" }
  end
end
local refused = wrong_type(checks)
if refused then return refused end
local issued = tonumber(redis.call("GET", KEYS[4]) or "0")
local live = tonumber(redis.call("HGET", KEYS[3], "live") or "0")
local out = {}
for i = 7, #ARGV, 4 do
  local action, field, reason, delay = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local record = live > 0 and redis.call("HGET", KEYS[3], field)
  local code, due = 1, 0
  if not record then
    local fence = fence_of(field)
    if not fence or fence < 1 or fence > issued then code = -3
    elseif redis.call("ZSCORE", KEYS[8], fence) then code = -2
    else code = -1 end
  else
    local kind, value = parse_record(record)
    if action == "x" then
      if kind ~= "-" and k.claims > 0 then redis.call("ZADD", KEYS[5], "XX", now, claim_member(kind, value, field)) end
    elseif action ~= "c" then
      remove_delivery(k, field, kind, value)
      live = live - 1
      if action == "a" or action == "d" then
        redis.call("HINCRBY", KEYS[3], "completed", 1)
      elseif action == "u" then
        redis.call("RPUSH", KEYS[1], value)
      else
        local before, last = read_item(value)
        local count = before + 1
        local err = action == "b" and last or reason
        local wait = 0
        if action == "r" then
          wait = delay == "" and backoff(policy, count, nth_random(seed, i)) or tonumber(delay)
        end
        local dead = action == "k" or (max > 0 and count >= max)
        local fence = fence_of(field)
        due = put_back(k, value, count, err, fence, now, wait, action == "b", dead, ttl)
        if due < 0 then code, due = 2, 0 end
        if action == "b" then tombstone(k, fence, now) end
      end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = due
end
return out
