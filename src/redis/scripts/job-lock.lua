--[[
  A job's execution lock (SPEC C5, C14): "owner:fence:expires". Expiry is
  checked against the caller's clock (Redis's, in production) and backed by a
  PX TTL, so a crashed instance's lock frees itself. Each acquisition takes a
  new fencing number from the job's counter; only the owner with that fence
  can renew or release it.
  KEYS[1] lock key   KEYS[2] fence counter
  ARGV[1] "acquire" | "renew" | "release"   ARGV[2] owner   ARGV[3] fence (renew, release)
  ARGV[4] now (ms)   ARGV[5] ttl (ms)
  Returns: acquire: { 1, fence } or { 0, holder's fence }; renew, release: 1 or 0.
]]
local op, owner, fence, now, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local held = redis.call("GET", KEYS[1])
local h_owner, h_fence, h_expires
if held then
  h_owner, h_fence, h_expires = string.match(held, "^(.*):(%d+):(%d+)$")
end
local live = held and tonumber(h_expires) > now
if op == "acquire" then
  if live then return { 0, tonumber(h_fence) } end
  local f = redis.call("INCR", KEYS[2])
  redis.call("SET", KEYS[1], owner .. ":" .. f .. ":" .. (now + ttl), "PX", ttl)
  return { 1, f }
end
if not live or h_owner ~= owner or h_fence ~= fence then return 0 end
if op == "renew" then
  redis.call("SET", KEYS[1], owner .. ":" .. fence .. ":" .. (now + ttl), "PX", ttl)
else
  redis.call("DEL", KEYS[1])
end
return 1
