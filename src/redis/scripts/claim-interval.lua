--[[
  Claims the next run of an interval job (seed 002, SPEC I1) atomically: the
  job runs when now > last run + interval, and the check and the new last-run
  time are one step, so two instances can never both run one interval.
  A claim made while the job is not RUNNING is recorded as minus its time: it
  holds back the other instances' claims of that state for an interval (one
  of them logs why), but it is no run, so a job resumed runs when its last real
  run is an interval old, not an interval after the claim that ran nothing.
  KEYS[1] jobs hash   KEYS[2] ticks hash (job id → last run, ms; negative: a claim while not running)
  ARGV[1] job id   ARGV[2] now (ms)   ARGV[3] interval (ms)
  Returns: { "gone" }, { "wait", last run }, { "inactive", now, job }, or { "run", now, job }.
]]
local json = redis.call("HGET", KEYS[1], ARGV[1])
if not json then return { "gone" } end
local job = cjson.decode(json)
if job.deleted then return { "gone" } end
local now, interval = tonumber(ARGV[2]), tonumber(ARGV[3])
local running = job.status == 1
local raw = redis.call("HGET", KEYS[2], ARGV[1])
local last = tonumber(raw)
if last and last < 0 then
  if not running and now <= -last + interval then return { "wait", string.sub(raw, 2) } end
elseif last and now <= last + interval then
  return { "wait", raw }
end
if not running then
  redis.call("HSET", KEYS[2], ARGV[1], "-" .. ARGV[2])
  return { "inactive", ARGV[2], json }
end
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
return { "run", ARGV[2], json }
