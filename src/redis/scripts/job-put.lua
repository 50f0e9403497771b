--[[
  Replaces a job's record only if it is still the one the caller read, so two
  concurrent changes (a pause and an update, say) cannot overwrite each other;
  the caller re-reads and retries. Announces the change on success.
  KEYS[1] jobs hash
  ARGV[1] job id   ARGV[2] the record as read   ARGV[3] the new record   ARGV[4] channel
  Returns: 1 stored, 0 changed meanwhile.
]]
if redis.call("HGET", KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[3])
redis.call("PUBLISH", ARGV[4], ARGV[1])
return 1
