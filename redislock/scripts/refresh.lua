-- Extends the lock if the caller holds it, and keeps the fencing counter
-- alive with it.
--
-- KEYS[1] the lock     KEYS[2] the fencing counter
-- ARGV[1] owner        ARGV[2] ttl ms        ARGV[3] fence counter ttl ms
--
-- Returns 1 when the caller holds the lock, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
