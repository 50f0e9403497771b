--[[
  Settles deliveries of a STREAM queue. A delivery is live while its entry is
  pending in its group for the consumer that leased it with the same delivery
  count and fence (fencing: once the entry was reclaimed, handed back, or
  delivered again after its group moved or was created again, the old token
  is refused). Handing an entry back moves it to the parking consumer with an
  idle time that lets the next XAUTOCLAIM (stream-lease.lua) take it at once,
  or after the retry's wait; that claim counts the next delivery.
  KEYS[1] stream   KEYS[2] dead-letter list   KEYS[3] counts hash
  ARGV[1] max deliveries   ARGV[2] min idle (ms)   ARGV[3] retry policy
  ARGV[4] a random number in [0, 1)   ARGV[5] the parking consumer
  ARGV[6..] octuples: action, group, id, delivery count, consumer, fence, reason, delay ("" : the policy's). Actions:
    a ack, d drop: XACK        r retry: back after the wait, or dead-lettered at max deliveries
    b back: at once (its stream closed; the next delivery counts)
    u undo: at once, uncounted (it never reached a worker)
    k kill: to the dead letters at once with its reason (it fits no delivery message)
    x extend: XCLAIM to the same consumer (idle restarts)   c check: change nothing
  Returns: a flat array, two numbers per settle: a code (1 done, 2 dead-lettered,
    -1 not held: acked already, or trimmed from the stream, -2 superseded: reclaimed
    or handed back since) and, for a retry that applied, its wait in ms. Or, having
    changed nothing, wrong_type's SYWRONGTYPE error when the counts hash (or, for a
    kill or retry, the dead-letter list) holds another type.
]]
return stream_settle_all(KEYS, ARGV, 6)
