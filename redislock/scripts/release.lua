-- Releases the lock if the caller holds it and hands it to the first live
-- waiter; also removes the caller's queue entry (a waiter giving up).
-- Runs after lib.lua.
--
-- ARGV[1] owner        ARGV[2] fence counter ttl ms
--
-- Returns 1 when the caller held the lock, 0 otherwise.
local owner = ARGV[1]
-- Without a queue (the usual case) there is no entry to remove and nobody
-- to hand the lock to: one EXISTS spares both.
local queued = redis.call('EXISTS', KEYS[3], KEYS[4]) > 0
if queued then
  dequeue(owner)
end
if redis.call('GET', KEYS[1]) ~= owner then
  return 0
end
redis.call('DEL', KEYS[1])
if queued then
  hand_off(ARGV[2], false)
end
return 1
