--[[
  Moves the due times of entries handed back in one group of a STREAM queue
  when its min_idle changes. A handed-back entry waits under the parking
  consumer with an idle time that says when it is due: min_idle less its
  wait (stream-settle.lua), so a min_idle changed by (new - old) moves each
  idle time by as much, and each entry stays due when it was (one due at once
  stays due; a wait longer than the new min_idle is cut to it). One page of
  the parking consumer's pending list per call.
  KEYS[1] stream   KEYS[2] counts hash
  ARGV[1] group   ARGV[2] parking consumer   ARGV[3] new min_idle - old (ms)
  ARGV[4] where the page starts ("-", or "(" and an id)   ARGV[5] most entries per page
  Returns: where the next page starts, or "" when this was the last.
]]
local stream, group, max = KEYS[1], ARGV[1], tonumber(ARGV[5])
local pending = redis.call("XPENDING", stream, group, ARGV[4], "+", max, ARGV[2])
local delta = tonumber(ARGV[3])
for _, p in ipairs(pending) do
  local idle = p[3] + delta
  if idle < 0 then idle = 0 end
  local claimed = redis.call("XCLAIM", stream, group, ARGV[2], 0, p[1], "IDLE", idle, "JUSTID")
  -- Trimmed from the stream while pending: XCLAIM took it out of the pending list; its records go too.
  if #claimed == 0 then redis.call("HDEL", KEYS[2], "e:" .. group .. ":" .. p[1], "f:" .. group .. ":" .. p[1]) end
end
if #pending < max then return "" end
return "(" .. pending[#pending][1]
