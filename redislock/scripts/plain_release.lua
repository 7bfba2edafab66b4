-- Releases a lock of layout=redsync, the plain key <prefix><name>, if the
-- caller holds it, and wakes dlock's waiters for it: the peers' waiters
-- poll, dlock's listen on the lock's channel, dlock:released:{<lock key>}
-- (plainChannel in kinds.go), in the lock's slot.
--
-- KEYS[1] the lock
-- ARGV[1] owner        ARGV[2] "s": announce by SPUBLISH (a Redis 7
--                      Cluster), otherwise by PUBLISH
--
-- Returns 1 when the caller held the lock, 0 otherwise (a peer's lock,
-- holding another value, is left alone).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local channel = 'dlock:released:{' .. KEYS[1] .. '}'
if ARGV[2] == 's' then
  redis.call('SPUBLISH', channel, '')
else
  redis.call('PUBLISH', channel, '')
end
return 1
