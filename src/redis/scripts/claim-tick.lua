--[[
  Claims one tick of a cron job for the calling instance. A tick is identified
  by its scheduled time, which every instance computes alike from the
  schedule, so exactly one claim per tick succeeds, however many instances
  fire it. Reads the job in the same call, so a job deleted or paused behind
  the scheduler's back is seen at fire time (SPEC C8).
  KEYS[1] jobs hash   KEYS[2] ticks hash
  ARGV[1] job id   ARGV[2] tick time (ms)
  Returns: { "gone" } (no such job, or deleted), { "taken" } (another instance
  claimed this tick or a later one), { "inactive", job } (claimed, but the job
  is not RUNNING), or { "run", job }.
]]
local json = redis.call("HGET", KEYS[1], ARGV[1])
if not json then return { "gone" } end
local job = cjson.decode(json)
if job.deleted then return { "gone" } end
local last = redis.call("HGET", KEYS[2], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then return { "taken" } end
redis.call("HSET", KEYS[2], ARGV[1], ARGV[2])
if job.status ~= 1 then return { "inactive", json } end
return { "run", json }
