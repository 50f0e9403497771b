--[[
  Delivers entries of a STREAM queue to one consumer of a group, in one call:
  first the entries the caller just handed back (retry, a closed stream) that
  are still parked and due (XCLAIM by id), then entries idle in the group's
  pending list longer than min_idle (XAUTOCLAIM from the cursor), each claim
  counting another delivery, sending those past max deliveries to the
  dead-letter list (acked there); then new entries (XREADGROUP ">"). Each
  delivery is numbered from the queue's fence counter, and its number kept in
  the counts hash ("f:<group>:<id>") for settles to check: an entry delivered again by XREADGROUP after its group was moved back
  or created again has its delivery count reset to 1 by Redis, so the count
  alone would let the earlier delivery's token settle the new one.
  KEYS[1] stream   KEYS[2] fence counter   KEYS[3] dead-letter list   KEYS[4] counts hash
  ARGV[1] group   ARGV[2] consumer   ARGV[3] max entries   ARGV[4] min idle (ms)
  ARGV[5] max deliveries   ARGV[6] XAUTOCLAIM cursor
  ARGV[7] ids the caller handed back, comma-separated ("" for none)   ARGV[8] parking consumer
  Returns: { next cursor, first fence, dead-lettered, wake id, trimmed, deliveries... }
    (trimmed: pending entries found trimmed from the stream, their records removed), each
    delivery { id, delivery count, last error, { field, value, ... } }. The wake id
    is the group's last delivered id when it read fewer new entries than it could
    (an XREAD after it wakes once there is more), else "". Or, having changed
    nothing, wrong_type's SYWRONGTYPE error when the fence counter, the dead-letter
    list or the counts hash holds another type.
]]
return stream_lease(KEYS, ARGV)
