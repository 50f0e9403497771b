--[[
  push.lua's and push-lease.lua's push, put before each script's own text.
  push_values(key, ttl, argv, first): LPUSHes argv[first..] (oldest first) onto
  `key` and, with `ttl` (ms) > 0, resets its expiry (seed 000: every push
  resets it). Refuses, changing nothing, when the key holds something other
  than a list. Returns the list's new length, or nil and the error
  "SYWRONGTYPE <type>"; raises any other error of LPUSH's.
]]
local function push_values(key, ttl, argv, first)
  -- Lua's unpack fails beyond ~8000 values ("too many results to unpack"), and one
  -- Enqueue may carry 10,000: push in chunks, which leaves the same list as one LPUSH.
  -- The key's type is LPUSH's own first check (a refused LPUSH writes nothing; after one
  -- chunk the key is a list): a TYPE call per push would cost as much as the push.
  local CHUNK = 1000
  local length
  for i = first, #argv, CHUNK do
    length = redis.pcall("LPUSH", key, unpack(argv, i, math.min(i + CHUNK - 1, #argv)))
    if type(length) == "table" then break end
  end
  if type(length) ~= "number" then -- refused, or nothing to push: a key of another type is named
    local kind = redis.call("TYPE", key).ok
    if kind ~= "list" and kind ~= "none" then return nil, "SYWRONGTYPE " .. kind end
    if length then error(length) end -- any other refusal, as redis.call would have raised it
  end
  if tonumber(ttl) > 0 then redis.call("PEXPIRE", key, ttl) end
  return length
end
