-- Takes the lock, or reports its holder's remaining time; in wait mode it
-- also queues the caller (or renews its queue entry).
--
-- ARGV[1] owner        ARGV[2] ttl ms        ARGV[3] fence counter ttl ms
-- wait mode only (with KEYS[3] and KEYS[4]):
-- ARGV[4] channel      ARGV[5] entry lifetime ms
--
-- Returns the token, an integer, when the caller holds the lock (a plain
-- integer reply costs the server less than an array); otherwise {0, pttl,
-- counter}: the holder's remaining time and the fencing counter now, which
-- lets a waiter tell a grant message sent before this call (stale: the
-- lock it granted has expired since) from one sent after.

local owner, ttl, fence_ttl = ARGV[1], ARGV[2], ARGV[3]
local wait = #ARGV > 3

-- Free: take it, in try mode at once (a first attempt, which has not
-- queued), in wait mode only if nobody waits. This common case comes
-- before the shared functions, which it does not need: Lua builds each
-- function again on every call, which costs more than the path itself.
local token
if (not wait or redis.call('EXISTS', KEYS[3]) == 0) and
    redis.call('SET', KEYS[1], owner, 'NX', 'PX', ttl) then
  token = redis.call('INCR', KEYS[2])
  if token > 1 then
    return token
  end
end

--@lib

-- A counter INCR has just created: seed it (see next_token).
if token then
  return seed_token(fence_ttl)
end

local cur = redis.call('GET', KEYS[1])

-- Already ours: a retried call, or a handoff whose message was lost.
if cur == owner then
  redis.call('PEXPIRE', KEYS[1], ttl)
  if wait then
    dequeue(owner)
  end
  return current_token(fence_ttl)
end

local function held()
  return {0, redis.call('PTTL', KEYS[1]), tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if not wait then
  return held()
end

-- Queue the caller, or push its entry's deadline forward; the queue's keys
-- live as long as the longest entry, so abandoned queues vanish.
local lifetime = tonumber(ARGV[5])
local entry = string.format('%.0f', now_ms() + lifetime) .. ' ' .. ttl .. ' ' .. ARGV[4]
if redis.call('HSET', KEYS[4], owner, entry) == 1 then
  redis.call('RPUSH', KEYS[3], owner)
end
for i = 3, 4 do
  if redis.call('PTTL', KEYS[i]) < lifetime then
    redis.call('PEXPIRE', KEYS[i], lifetime)
  end
end

-- Free but with others waiting (the holder expired): the queue's head
-- gets it, which may be the caller.
if not cur then
  local w, token = hand_off(fence_ttl, owner)
  if w == owner then
    return token
  end
end
return held()
