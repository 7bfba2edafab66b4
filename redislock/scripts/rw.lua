-- The readers-writer lock.
--   KEYS[1] the writer: a hash (see hash_holder), expiring with its lease
--   KEYS[5] the readers' tokens: a hash owner -> token
--   KEYS[6] the readers: a sorted set of owners scored by expiry (ms)
-- ARGV as in kinds.lua; the tag is r or w.
--
-- The common cases come first, written out so that they return before
-- the shared functions are defined (a closure each, on every call that
-- reaches them): taking the lock with nobody queued and nobody in the
-- way, refreshing, and releasing with nobody queued, each only when no
-- reader's lease has expired (the full path would first clean up). Each
-- leaves the keys as the full path would; a case they do not cover falls
-- through to it having changed nothing. A grant replies with the bare
-- token, an integer, rather than {1, token}, which costs the server more
-- to reply.
local op, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
if ARGV[8] == 'w' then
  -- A writer. While one holds there is no reader: the full path would
  -- have nothing to clean up.
  if op == 'refresh' then
    if redis.call('EXISTS', KEYS[6]) == 0 then
      if redis.call('HGET', KEYS[1], 'o') ~= owner then
        return 0
      end
      redis.call('PEXPIRE', KEYS[1], ttl)
      return 1
    end
  elseif op == 'release' then
    if redis.call('EXISTS', KEYS[3], KEYS[6]) == 0 then
      if redis.call('HGET', KEYS[1], 'o') ~= owner then
        return 0
      end
      redis.call('DEL', KEYS[1])
      return 1
    end
  elseif redis.call('EXISTS', KEYS[3], KEYS[1], KEYS[6]) == 0 then
    -- Free, with nobody queued and no reader: take it.
    local token = redis.call('INCR', KEYS[2])
    if token == 1 then
      -- A new counter: seed it (see next_token in lib.lua).
      local t = redis.call('TIME')
      redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[4])
      token = redis.call('INCR', KEYS[2])
    end
    redis.call('HSET', KEYS[1], 'o', owner, 't', string.format('%.0f', token))
    redis.call('PEXPIRE', KEYS[1], ttl)
    return token
  end
else
  -- A reader: refreshing; releasing with nobody queued; taking with
  -- nobody queued and no writer. Only while the earliest expiry of a
  -- reader is still ahead.
  local clear = op == 'refresh'
  if op == 'release' then
    clear = redis.call('EXISTS', KEYS[3]) == 0
  elseif not clear then
    clear = redis.call('EXISTS', KEYS[3], KEYS[1]) == 0
  end
  local t, now, first
  if clear then
    t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    first = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  end
  if clear and (not first[2] or tonumber(first[2]) > now) then
    if op == 'release' then
      if redis.call('ZREM', KEYS[6], owner) == 0 then
        return 0
      end
      redis.call('HDEL', KEYS[5], owner)
      return 1
    end
    local expiry = string.format('%.0f', now + tonumber(ttl))
    local token = 1
    if op == 'refresh' then
      if not redis.call('ZSCORE', KEYS[6], owner) then
        return 0
      end
      redis.call('ZADD', KEYS[6], 'XX', expiry, owner)
    elseif redis.call('ZADD', KEYS[6], 'NX', expiry, owner) == 1 then
      -- The caller was not reading yet: it joins the readers.
      token = redis.call('INCR', KEYS[2])
      if token == 1 then
        t = redis.call('TIME')
        redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[4])
        token = redis.call('INCR', KEYS[2])
      end
      redis.call('HSET', KEYS[5], owner, string.format('%.0f', token))
    else
      token = false -- already reading: the full path
    end
    if token then
      -- keep (see kinds.lua) both keys.
      if redis.call('PTTL', KEYS[6]) < tonumber(ttl) then
        redis.call('PEXPIRE', KEYS[6], ttl)
      end
      if redis.call('PTTL', KEYS[5]) < tonumber(ttl) then
        redis.call('PEXPIRE', KEYS[5], ttl)
      end
      return token
    end
  end
end

-- @lib

local writer = hash_holder(KEYS[1])
local readers = zset_holders(KEYS[6], KEYS[5])

return run({
  cleanup = readers.cleanup,
  -- A reader needs no writer, a writer neither writer nor reader. Queue
  -- order is kept by the caller: a reader behind a waiting writer waits.
  admit = function(tag)
    if writer.exists() then
      return false
    end
    return tag == 'r' or readers.count() == 0
  end,
  take = function(w, ttl, tag, _, token)
    if tag == 'w' then
      writer.set(w, ttl, token)
    else
      readers.add(w, ttl, token)
    end
  end,
  token = function(owner, tag)
    if tag == 'w' then
      return writer.token(owner)
    end
    return readers.token(owner)
  end,
  extend = function(owner, tag, ttl)
    if tag == 'w' then
      writer.extend(ttl)
    else
      readers.extend(owner, ttl)
    end
  end,
  drop = function(owner, tag)
    if tag == 'w' then
      writer.drop()
    else
      readers.drop(owner)
    end
  end,
  pttl = function()
    local p = writer.pttl()
    if p >= 0 then
      return p
    end
    return readers.pttl()
  end,
})
