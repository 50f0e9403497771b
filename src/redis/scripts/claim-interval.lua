--[[
  Claims the next run of an interval job (seed 002, SPEC I1) atomically: the
  job runs when now > last run + interval, and the check and the new last-run
  time are one step, so two instances can never both run one interval.
  KEYS[1] jobs hash   KEYS[2] ticks hash (job id → last run, ms)
  ARGV[1] job id   ARGV[2] now (ms)   ARGV[3] interval (ms)
  Returns: { "gone" }, { "wait", last run }, { "inactive", now, job }, or { "run", now, job }.
]]
local json = redis.call("HGET", KEYS[1], ARGV[1])
if not json then return { "gone" } end
local job = cjson.decode(json)
if job.deleted then return { "gone" } end
local last = redis.call("HGET", KEYS[2], ARGV[1])
if last and tonumber(ARGV[2]) <= tonumber(last) + tonumber(ARGV[3]) then return { "wait", last } end
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
if job.status ~= 1 then return { "inactive", ARGV[2], json } end
return { "run", ARGV[2], json }
