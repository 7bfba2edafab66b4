-- Renews the lock on one node if the caller holds it there, and keeps the
-- fencing counter alive with it.
--
-- KEYS[1] the lock          KEYS[2] the fencing counter
-- ARGV[1] owner             ARGV[2] lock ttl ms
-- ARGV[3] counter ttl ms, or "0" when fencing is off
--
-- Returns 1 when the caller holds the lock here, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
