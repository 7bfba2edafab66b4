-- Phase 1 of an acquisition on one node: take the lock if it is free (or
-- already ours, from an earlier attempt of the same request) and advance
-- the node's fencing counter.
--
-- KEYS[1] the lock          KEYS[2] the fencing counter
-- ARGV[1] owner             ARGV[2] lock ttl ms
-- ARGV[3] counter ttl ms, or "0" when fencing is off
--
-- Returns the counter's new value (0 when fencing is off) when the caller
-- holds the lock, or {pttl, holder} when another owner does.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] then
    return {redis.call('PTTL', KEYS[1]), holder}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if ARGV[3] == '0' then
  return 0
end
-- A missing counter (first use, expired, or lost in a restart without
-- persistence) starts at the server's clock in microseconds. It is built
-- as a string: Lua numbers would print it in exponent form.
if redis.call('EXISTS', KEYS[2]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return n
