#!lua flags=allow-oom
--[[
  Leases up to ARGV[2] items of a reliable queue: moves each from the queue
  into the processing list (LMOVE, the seed's move) and records its delivery
  (see lib.lua): the record under "<fence>@<owner>", and with a recovery set
  the claim, scored with the claim time. All in one call, so no item is ever
  moved without its record.
  KEYS[1] queue list   KEYS[2] processing list   KEYS[3] leases hash
  KEYS[4] fence counter   KEYS[5] recovery zset (ignored when ARGV[3] ~= "1")
  ARGV[1] now (ms)   ARGV[2] max items   ARGV[3] "1" with a recovery set
  ARGV[4] recovery ttl (ms, 0: none)   ARGV[5] owner: the leasing instance's id
  Returns: a flat array: value and fence of each moved item (its delivery
  count is its history's deliveries plus one, read by the caller). Or, moving
  nothing, an error "SYWRONGTYPE ..." when the fence counter, the leases hash
  or the recovery set holds another type (lib.lua's wrong_type).
  Runs when Redis is out of memory (allow-oom): moving an item takes next to
  no memory, and leasing is how a full Redis drains.
  Moves no more than LLEN items: it never touches the queue once it is empty
  (while a cluster slot migrates, a key that disappears mid-script is "non
  local" and the script would stop halfway, with items moved but never delivered).
]]
return lease_items(KEYS, ARGV)
