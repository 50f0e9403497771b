--[[
  Writes a queue declaration and the ownership of every key it names, as one
  step, so two declarations can never claim one key (SPEC Q15), and announces
  it with a new version (see undeclare.lua). With ARGV[3] ~= "", writes only if the
  stored declaration is still ARGV[3] (an update read-modify-write); with ARGV[3] == "",
  only if none is stored.
  KEYS[1] declarations hash (name → JSON)   KEYS[2] key owners hash (key → queue name)
  KEYS[3] version counter
  ARGV[1] name   ARGV[2] declaration JSON   ARGV[3] the declaration it replaces, or ""
  ARGV[4] channel to announce on   ARGV[5..] the queue's keys
  Returns: { "ok", version } | { "exists", stored JSON } | { "changed" } | { "clash", key, owner }.
]]
local name, json, expected = ARGV[1], ARGV[2], ARGV[3]
local stored = redis.call("HGET", KEYS[1], name)
if expected == "" and stored then return { "exists", stored } end
if expected ~= "" and stored ~= expected then return { "changed" } end
for i = 5, #ARGV do
  local owner = redis.call("HGET", KEYS[2], ARGV[i])
  if owner and owner ~= name then return { "clash", ARGV[i], owner } end
end
redis.call("HSET", KEYS[1], name, json)
for i = 5, #ARGV do redis.call("HSET", KEYS[2], ARGV[i], name) end
local version = redis.call("INCR", KEYS[3])
-- The stored JSON as it is (a decode and encode would rewrite its numbers).
redis.call("PUBLISH", ARGV[4], '{"op":"put","name":' .. cjson.encode(name) .. ',"version":' .. version .. ',"config":' .. json .. "}")
return { "ok", version }
