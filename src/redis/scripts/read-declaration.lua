#!lua flags=no-writes
--[[
  Reads queue declarations as they stand, with the version counter, as one step
  (registry.ts: load() and reload()). A script rather than a MULTI: every Lease
  open makes this read, and a burst of opens made as MULTIs held an ioredis
  pipeline object each; and it writes nothing, so Redis runs it when out of
  memory too, where it refuses every command of a MULTI.
  KEYS[1] version counter   KEYS[2] declarations hash
  ARGV[1] a queue's name, or none for every declaration
  Returns: { version or nil, the name's declaration JSON or nil } with a name;
  { version or nil, { name, JSON, name, JSON, … } } without.
]]
local version = redis.call("GET", KEYS[1]) or false
if #ARGV == 0 then return { version, redis.call("HGETALL", KEYS[2]) } end
return { version, redis.call("HGET", KEYS[2], ARGV[1]) or false }
