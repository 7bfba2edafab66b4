-- Renews the lock if the caller holds it. The fencing counter keeps the
-- expiry it was seeded with (see next_token in lib.lua).
--
-- KEYS[1] the lock
-- ARGV[1] owner        ARGV[2] ttl ms
--
-- Returns 1 when the caller holds the lock, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
