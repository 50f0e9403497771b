--[[
  Settles deliveries of a reliable queue. Each settle names a delivery by its
  field "<fence>@<owner>" (see lib.lua) and applies only while that delivery
  is live (fencing: a late settle from a stalled worker never touches the copy
  another worker now holds).
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] fence counter   KEYS[5] recovery zset (ignored when ARGV[3] ~= "1")
  KEYS[6] dead-letter list   KEYS[7] delayed zset   KEYS[8] tombstones zset
  ARGV[1] now (ms)   ARGV[2] max deliveries   ARGV[3] "1" with a recovery set
  ARGV[4] retry policy "initial,multiplier,max,jitter"   ARGV[5] a random number in [0, 1)
  ARGV[6] publish ttl of the queue (ms, 0: none)
  ARGV[7..] quadruples: action, field, reason, delay ("" for the policy's, else ms). Actions:
    a ack: remove the item          d drop: remove the item
    r retry: after the delay, or at the back of the queue
    b back: the front of the queue (its stream closed); the delivery counts
    u undo: the front of the queue as it was (it never reached a worker)
    k kill: to the dead letters with the reason (it can never be delivered)
    x extend: restart the claim     c check: change nothing
  Returns: a flat array, two numbers per settle: a code (1 done, 2 dead-lettered,
    -1 not held: settled already, -2 superseded: returned or recovered since,
    -3 unknown: no such fence was ever issued) and, for a retry that applied,
    when the item is due (0: at once). Or, changing nothing, an error
    "SYWRONGTYPE ..." when a settle would put an item back into a key of another type.
]]
return settle_all(KEYS, ARGV, 7)
