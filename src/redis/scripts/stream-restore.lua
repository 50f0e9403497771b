--[[
  Creates the declared consumer groups of a stream that Redis lacks (a lease
  call found NOGROUP: the stream expired by its publish TTL, or was deleted,
  and may have been appended to again since). When the stream has no group at
  all, every entry in it came after the loss, so a group declared at "$"
  starts at "0": else the entries appended since would be skipped. One script,
  so two instances restoring at once agree.
  KEYS[1] stream   ARGV pairs: group, start id
  Returns: { 1 if it made the stream key (it did not exist), 0 if not, the groups it created... }.
]]
local stream = KEYS[1]
local missing = redis.call("EXISTS", stream) == 0
local fresh = missing or #redis.call("XINFO", "GROUPS", stream) == 0
local created = { missing and 1 or 0 }
for i = 1, #ARGV, 2 do
  local start = ARGV[i + 1]
  if fresh and start == "$" then start = "0" end
  local ok = redis.pcall("XGROUP", "CREATE", stream, ARGV[i], start, "MKSTREAM")
  if type(ok) == "table" and ok.err then
    if string.sub(ok.err, 1, 9) ~= "BUSYGROUP" then return redis.error_reply(ok.err) end
  else
    created[#created + 1] = ARGV[i]
  end
end
return created
