--[[
  The watchdog: every claim idle longer than min_idle loses its delivery, whose
  item goes back, after the retry policy's wait, with the reason ARGV[7] (to
  the dead letters once it used up its deliveries). The stalled holder's late
  settle is then refused as superseded.
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] recovery zset   KEYS[5] dead-letter list   KEYS[6] delayed zset
  KEYS[7] tombstones zset
  ARGV[1] now (ms)   ARGV[2] min idle (ms)   ARGV[3] max claims this call
  ARGV[4] max deliveries   ARGV[5] retry policy "initial,multiplier,max,jitter"
  ARGV[6] a random number in [0, 1)   ARGV[7] the reason   ARGV[8] publish ttl (ms, 0: none)
  Returns: { recovered, dead-lettered, stale claims seen, earliest due time (0: none delayed) }.
  A stale claim with no live delivery (its delivery was settled in the same
  moment, or a record from before) is only removed.
]]
local now, max = tonumber(ARGV[1]), tonumber(ARGV[4])
local stale = redis.call("ZRANGEBYSCORE", KEYS[4], "-inf", now - tonumber(ARGV[2]), "LIMIT", 0, tonumber(ARGV[3]))
if #stale == 0 then return { 0, 0, 0, 0 } end
local refused = wrong_type({ KEYS[1], "list", KEYS[3], "hash", KEYS[6], "zset", KEYS[5], "list", KEYS[7], "zset" })
if refused then return refused end
local k = queue_context({
  queue = KEYS[1], processing = KEYS[2], leases = KEYS[3], recovery = KEYS[4],
  dead = KEYS[5], delayed = KEYS[6], returned = KEYS[7],
}, true)
-- Every stale claim goes, its delivery recovered or not: they are the set's first #stale by rank,
-- taken out with one ZREMRANGEBYRANK after the loop (so a call that fails in it leaves them).
k.claims_gone = true
-- Its put-backs and tombstones are written once, at its end (see WRITES): nothing in the loop reads
-- those keys, and nothing in it can fail: the keys' types are checked above, a field of another
-- client's with no fence counts as fence 0, and the leases hash keeps its "live" count, so removing
-- deliveries never empties it. (An emptied key, read again while the cluster slot migrates, fails
-- the call: "non local key". A hash another client left without "live" is written item by item.)
if redis.call("HEXISTS", KEYS[3], "live") == 1 then k.gathered = {} end
-- The tombstones' score: `now` as Lua writes a number, made once.
local score, seed, ttl = tostring(now), tonumber(ARGV[6]), tonumber(ARGV[8])
local recovered, dead, earliest = 0, 0, 0
for i, member in ipairs(stale) do
  local field
  if derived(member) then field = sub(member, #DERIVED + 1) end
  local record = field and redis.call("HGET", KEYS[3], field)
  local kind, value, sha, n
  if record then kind, value = parse_record(record) end
  if not record or kind ~= "d" then
    -- The member is a value: the delivery that claims under it (and how many of the value are live).
    sha = redis.sha1hex(member)
    local got = redis.call("HMGET", KEYS[3], "m:" .. sha, "n:" .. sha)
    field, n = got[1], got[2]
    record = field and redis.call("HGET", KEYS[3], field)
    if record then kind, value = parse_record(record) end
  end
  if record and claim_member(kind, value, field) == member then
    -- A claim under the value itself: its sha and count are the value's.
    if kind == "v" then remove_delivery(k, field, kind, value, sha, n) else remove_delivery(k, field, kind, value) end
    local before, _, kept = read_item(value)
    local count = before + 1
    local fence = fence_of(field) or 0
    local wait = backoff(ARGV[5], count, nth_random(seed, i))
    local due = put_back(k, value, kept, count, ARGV[7], fence, now, wait, true, max > 0 and count >= max, ttl)
    tombstone(k, fence, score)
    if due < 0 then
      dead = dead + 1
    else
      recovered = recovered + 1
      if due > 0 and (earliest == 0 or due < earliest) then earliest = due end
    end
  end
end
redis.call("ZREMRANGEBYRANK", KEYS[4], 0, #stale - 1)
finish_call(k)
return { recovered, dead, #stale, earliest }
