-- Phase 2 of an acquisition on one node: where the caller still holds the
-- lock, raise the fencing counter to the token chosen in phase 1, so that
-- the token is stored on a quorum.
--
-- KEYS[1] the lock          KEYS[2] the fencing counter
-- ARGV[1] owner             ARGV[2] token          ARGV[3] counter ttl ms
--
-- Returns 1 when the caller holds the lock here (the counter is now at
-- least the token), 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
