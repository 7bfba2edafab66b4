-- Releases the lock if the caller holds it and hands it to the first live
-- waiter; also removes the caller's queue entry (a waiter giving up).
--
-- ARGV[1] owner        ARGV[2] fence counter ttl ms        ARGV[3] lock name
--
-- Returns 1 when the caller held the lock, 0 otherwise.
local owner = ARGV[1]
dequeue(owner)
if redis.call('GET', KEYS[1]) ~= owner then
  return 0
end
redis.call('DEL', KEYS[1])
hand_off(ARGV[3], ARGV[2], false)
return 1
