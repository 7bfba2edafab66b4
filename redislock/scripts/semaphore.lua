-- The semaphore.
--   KEYS[1] the holders: a sorted set of owners scored by expiry (ms)
--   KEYS[5] the holders' tokens: a hash owner -> token
-- ARGV as in kinds.lua; the tag is p and ARGV[9] the limit (the caller's:
-- every user of a semaphore passes the same).
--
-- The common cases come first, written out as in rw.lua (see there why):
-- taking a permit with nobody queued and fewer than limit holders,
-- refreshing, and releasing with nobody queued, each only while no
-- holder's lease has expired (the full path would first clean up). Each
-- leaves the keys as the full path would; a case they do not cover falls
-- through to it having changed nothing. A grant replies with the bare
-- token.
local op, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
if op == 'refresh' or redis.call('EXISTS', KEYS[3]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if not first[2] or tonumber(first[2]) > now then
    if op == 'release' then
      if redis.call('ZREM', KEYS[1], owner) == 0 then
        return 0
      end
      redis.call('HDEL', KEYS[5], owner)
      return 1
    end
    local expiry = string.format('%.0f', now + tonumber(ttl))
    local token = 1
    if op == 'refresh' then
      if not redis.call('ZSCORE', KEYS[1], owner) then
        return 0
      end
      redis.call('ZADD', KEYS[1], 'XX', expiry, owner)
    elseif redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[9]) and
        redis.call('ZADD', KEYS[1], 'NX', expiry, owner) == 1 then
      -- A permit free and the caller not holding one yet: take it.
      token = redis.call('INCR', KEYS[2])
      if token == 1 then
        -- A new counter: seed it (see next_token in lib.lua).
        t = redis.call('TIME')
        redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[4])
        token = redis.call('INCR', KEYS[2])
      end
      redis.call('HSET', KEYS[5], owner, string.format('%.0f', token))
    else
      token = false -- no permit free, or already holding: the full path
    end
    if token then
      -- keep (see kinds.lua) both keys.
      if redis.call('PTTL', KEYS[1]) < tonumber(ttl) then
        redis.call('PEXPIRE', KEYS[1], ttl)
      end
      if redis.call('PTTL', KEYS[5]) < tonumber(ttl) then
        redis.call('PEXPIRE', KEYS[5], ttl)
      end
      return token
    end
  end
end

-- @lib

local holders = zset_holders(KEYS[1], KEYS[5])
local limit = tonumber(ARGV[9])

return run({
  cleanup = holders.cleanup,
  admit = function()
    return holders.count() < limit
  end,
  take = function(w, ttl, _, _, token)
    holders.add(w, ttl, token)
  end,
  token = function(owner)
    return holders.token(owner)
  end,
  extend = function(owner, _, ttl)
    holders.extend(owner, ttl)
  end,
  drop = function(owner)
    holders.drop(owner)
  end,
  pttl = holders.pttl,
})
