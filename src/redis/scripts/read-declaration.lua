#!lua flags=no-writes
--[[
  Reads one queue declaration as it stands, with the version counter and the
  version of the name's last delete (registry.ts, load()), as one step. A script
  rather than a MULTI: a Lease open makes this read, and a burst of opens made as
  MULTIs held an ioredis pipeline object each. It writes nothing, so Redis runs it
  when out of memory too.
  KEYS[1] version counter   KEYS[2] declarations hash   KEYS[3] deletes hash
  ARGV[1] name
  Returns: { version or nil, declaration JSON or nil, last delete's version or nil }.
]]
return {
  redis.call("GET", KEYS[1]) or false,
  redis.call("HGET", KEYS[2], ARGV[1]) or false,
  redis.call("HGET", KEYS[3], ARGV[1]) or false,
}
