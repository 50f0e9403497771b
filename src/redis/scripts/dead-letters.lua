--[[
  Requeues or deletes dead letters of one queue. A requeued item goes onto the
  queue as it was first stored, without its history: it starts over with no
  deliveries and no last error, and workers take it after what is waiting.
  A STREAM queue's dead letter is appended to the stream as a new entry
  (XADD: its payload and headers as fields, a new entry id).
  KEYS[1] dead-letter list   KEYS[2] queue list (or stream)
  ARGV[1] "requeue" | "requeue-stream" | "delete"
  ARGV[2] "all": up to ARGV[3] dead letters, oldest first
          "values": the values ARGV[3..], one list entry each
  Returns how many dead letters moved or went; or, requeueing nothing, an error
  "SYWRONGTYPE ..." when the queue key holds another type.
]]
local to_stream = ARGV[1] == "requeue-stream"
local requeue = ARGV[1] == "requeue" or to_stream
if requeue then
  local refused = wrong_type({ KEYS[2], to_stream and "stream" or "list" })
  if refused then return refused end
end
local function put(value)
  if to_stream then redis.call("XADD", KEYS[2], "*", unpack(entry_fields(value)))
  else redis.call("LPUSH", KEYS[2], without_history(value)) end
end
if ARGV[2] == "all" then
  -- Counted first: no command touches the list after it is empty.
  local n = math.min(redis.call("LLEN", KEYS[1]), tonumber(ARGV[3]))
  if not requeue then
    if n == redis.call("LLEN", KEYS[1]) then
      if n > 0 then redis.call("DEL", KEYS[1]) end
    else
      redis.call("LTRIM", KEYS[1], 0, -(n + 1))
    end
    return n
  end
  for _ = 1, n do
    put(redis.call("RPOP", KEYS[1]))
  end
  return n
end
local done = 0
for i = 3, #ARGV do
  if redis.call("LREM", KEYS[1], -1, ARGV[i]) == 1 then
    if requeue then put(ARGV[i]) end
    done = done + 1
  end
end
return done
