-- Releases the lock if the caller holds it and hands it to the first live
-- waiter; also removes the caller's queue entry (a waiter giving up).
--
-- ARGV[1] owner        ARGV[2] fence counter ttl ms        ARGV[3] lock name
--
-- Returns 1 when the caller held the lock, 0 otherwise.
--
-- Without a queue (the usual case) there is no entry to remove and nobody
-- to hand the lock to: one EXISTS spares both, and the script returns
-- before the shared functions below are defined (a closure each, on every
-- call that reaches them).
local owner = ARGV[1]
if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
  if redis.call('GET', KEYS[1]) ~= owner then
    return 0
  end
  redis.call('DEL', KEYS[1])
  return 1
end

-- @lib

dequeue(owner)
if redis.call('GET', KEYS[1]) ~= owner then
  return 0
end
redis.call('DEL', KEYS[1])
hand_off(ARGV[3], ARGV[2], false)
return 1
