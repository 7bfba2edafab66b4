-- Releases the lock if the caller holds it and hands it to the first live
-- waiter; also removes the caller's queue entry (a waiter giving up).
--
-- ARGV[1] owner        ARGV[2] fence counter ttl ms
--
-- Returns 1 when the caller held the lock, 0 otherwise.
local owner = ARGV[1]

-- Nobody queued (the usual case): no entry to remove and nobody to hand
-- the lock to. Before the shared functions, which this path does not
-- need (see acquire.lua).
if redis.call('EXISTS', KEYS[3]) == 0 then
  if redis.call('GET', KEYS[1]) ~= owner then
    return 0
  end
  redis.call('DEL', KEYS[1])
  return 1
end

--@lib

dequeue(owner)
if redis.call('GET', KEYS[1]) ~= owner then
  return 0
end
redis.call('DEL', KEYS[1])
hand_off(ARGV[2], false)
return 1
