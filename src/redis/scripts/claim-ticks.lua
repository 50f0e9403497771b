--[[
  Claims one tick of several cron jobs for the calling instance, and takes the
  execution lock of each claimed job whose policy needs one (SPEC C4–C6, C8).
  A tick is identified by its scheduled time, which every instance computes
  alike from the schedule, so exactly one claim per job and tick succeeds,
  however many instances fire it. Each job is read in the same call, so a job
  deleted or paused behind the scheduler's back is seen at fire time.
  The lock is job-lock.lua's ("owner:fence:expires"), acquired as its "acquire"
  does: only when no live lock is held, with a new fence from the job's counter.
  KEYS[1] jobs hash   KEYS[2] ticks hash
  KEYS[2i+1], KEYS[2i+2] the lock key and fence counter of job i (i = 1..n)
  ARGV[1] tick time (ms)   ARGV[2] lock owner, or "" to take no lock
  ARGV[3] now (ms)   ARGV[4] lock ttl (ms)   ARGV[4+i] the id of job i
  Returns: four values per job, in order: result, job, lock, fence.
    result "gone" (no such job, or deleted), "taken" (another instance claimed
    this tick or a later one), "inactive" (claimed, but the job is not RUNNING)
    or "run"; job: its JSON ("" when gone or taken); lock: 0 not tried (no
    owner, not "run", or policy 1 concurrent), 1 acquired, 2 held by another
    run; fence: the acquired fence, or the holder's (0 when not tried).
]]
local tick, owner, now, ttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- The text of a number or boolean field of a job record, without decoding it
-- (a fraction of cjson.decode's cost). Records are flat JSON objects written
-- by JSON.stringify, in which a '"' inside a string is always escaped: '"key":'
-- occurs only as a key, and such a value runs to the next ',' or '}'.
local function field(json, key)
  local _, last = string.find(json, '"' .. key .. '":', 1, true)
  return last and string.match(json, "^[^,}]*", last + 1)
end

local function claim(id)
  local json = redis.call("HGET", KEYS[1], id)
  if not json or field(json, "deleted") == "true" then return "gone", "" end
  local last = redis.call("HGET", KEYS[2], id)
  if last and tonumber(last) >= tick then return "taken", "" end
  redis.call("HSET", KEYS[2], id, ARGV[1])
  if field(json, "status") ~= "1" then return "inactive", json end
  return "run", json, field(json, "executePolicy") ~= "1"
end

local function acquire(lock, fences)
  local held = redis.call("GET", lock)
  if held then
    local h_fence, h_expires = string.match(held, ":(%d+):(%d+)$")
    if tonumber(h_expires) > now then return 2, tonumber(h_fence) end
  end
  local f = redis.call("INCR", fences)
  redis.call("SET", lock, owner .. ":" .. f .. ":" .. (now + ttl), "PX", ttl)
  return 1, f
end

local out = {}
for i = 1, #ARGV - 4 do
  local result, json, needs_lock = claim(ARGV[4 + i])
  local lock, fence = 0, 0
  if needs_lock and owner ~= "" then lock, fence = acquire(KEYS[2 * i + 1], KEYS[2 * i + 2]) end
  out[#out + 1] = result
  out[#out + 1] = json
  out[#out + 1] = lock
  out[#out + 1] = fence
end
return out
