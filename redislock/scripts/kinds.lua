-- Shared by the readers-writer lock, the semaphore and the election: put,
-- after lib.lua, before rw.lua, semaphore.lua and election.lua.
--
-- Keys, all tagged "{name}" (KEYS[1] to KEYS[4] play the roles they play
-- for the mutex, so lib.lua's next_token and dequeue serve here too):
--   KEYS[1] the kind's main key (see each script)
--   KEYS[2] the fencing counter of the name in this kind
--   KEYS[3] the wait queue: a list of owners, first come first served
--   KEYS[4] the queue entries: a hash owner ->
--           "<deadline ms> <ttl ms> <tag> <channel length> <channel><value>"
--           where tag is r (reader), w (writer), p (permit) or l (leader
--           candidate), and value is a candidate's value (elections only)
--
-- ARGV[1] op: "try", "wait", "renew" or "release"
-- ARGV[2] owner        ARGV[3] ttl ms        ARGV[4] fence counter ttl ms
-- ARGV[5] lock name    ARGV[6] the caller's channel
-- ARGV[7] queue entry lifetime ms            ARGV[8] tag
-- ARGV[9] the kind's argument: the semaphore's limit, the candidate's value
-- ARGV[10], ARGV[11] the election's notification channel and how to
-- publish on it (elections only: see election.lua)
--
-- try and wait return {1, token} when the caller holds the lock, otherwise
-- {0, ms until the earliest expiry of a holder in the way (-1: none
-- known), the fencing counter now}; renew and release return 1 when the
-- caller held the lock, 0 otherwise.

local now = now_ms()

-- Numbers passed to redis.call are formatted explicitly: the default
-- conversion could round tokens (16 digits) and scores.

-- Makes key live at least ms more; keys of holders and queues thus vanish
-- once the last of them is stale.
local function keep(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Splits a queue entry: deadline (number), ttl, tag, channel, value.
local function parse_entry(e)
  local deadline, ttl, tag, clen, pos = string.match(e, '^(%d+) (%d+) (%a) (%d+) ()')
  if not pos then
    return nil
  end
  clen = tonumber(clen)
  return tonumber(deadline), ttl, tag, string.sub(e, pos, pos + clen - 1), string.sub(e, pos + clen)
end

-- Queues owner at the tail, or pushes its entry's deadline forward.
local function enqueue(owner, ttl, tag, channel, lifetime, value)
  local entry = string.format('%.0f', now + lifetime) .. ' ' .. ttl .. ' ' .. tag .. ' ' ..
    #channel .. ' ' .. channel .. value
  if redis.call('HSET', KEYS[4], owner, entry) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  keep(KEYS[3], lifetime)
  keep(KEYS[4], lifetime)
end

-- Admits waiters from the head of the queue for as long as k.admit allows
-- the head's tag, dropping entries whose deadline has passed (their
-- waiters stopped renewing them). Each admitted waiter gets the next
-- token and is told on its channel, except self (the caller, who learns
-- from the reply). Returns self's token if self was admitted, else false.
local function serve(k, name, fence_ttl, self)
  local mine = false
  while true do
    local w = redis.call('LINDEX', KEYS[3], 0)
    if not w then
      return mine
    end
    local e = redis.call('HGET', KEYS[4], w)
    local deadline, ttl, tag, channel, value
    if e then
      deadline, ttl, tag, channel, value = parse_entry(e)
    end
    if deadline and deadline >= now then
      if not k.admit(tag) then
        return mine
      end
      local token = next_token(fence_ttl)
      k.take(w, ttl, tag, value, token)
      if w == self then
        mine = token
      else
        notify(channel, string.format('%.0f', token) .. ' ' .. w .. ' ' .. name)
      end
    end
    redis.call('LPOP', KEYS[3])
    if e then
      redis.call('HDEL', KEYS[4], w)
    end
  end
end

-- Holders kept in a sorted set scored by their expiry (ms, server clock)
-- with their tokens in a hash: readers, permit holders.
local function zset_holders(zkey, tkey)
  local h = {}
  -- Drops the holders whose expiry has passed (they crashed).
  function h.cleanup()
    local max = string.format('%.0f', now)
    local gone = redis.call('ZRANGEBYSCORE', zkey, '-inf', max)
    if #gone > 0 then
      redis.call('ZREMRANGEBYSCORE', zkey, '-inf', max)
      for _, m in ipairs(gone) do
        redis.call('HDEL', tkey, m)
      end
    end
  end
  function h.add(w, ttl, token)
    redis.call('ZADD', zkey, string.format('%.0f', now + tonumber(ttl)), w)
    redis.call('HSET', tkey, w, string.format('%.0f', token))
    keep(zkey, ttl)
    keep(tkey, ttl)
  end
  function h.token(owner)
    if not redis.call('ZSCORE', zkey, owner) then
      return false
    end
    return tonumber(redis.call('HGET', tkey, owner) or '0')
  end
  function h.renew(owner, ttl)
    redis.call('ZADD', zkey, 'XX', string.format('%.0f', now + tonumber(ttl)), owner)
    keep(zkey, ttl)
    keep(tkey, ttl)
  end
  function h.drop(owner)
    redis.call('ZREM', zkey, owner)
    redis.call('HDEL', tkey, owner)
  end
  function h.count()
    return redis.call('ZCARD', zkey)
  end
  -- ms until the earliest holder's expiry, or -1 without holders.
  function h.pttl()
    local first = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
    if first[2] then
      return math.max(tonumber(first[2]) - now, 0)
    end
    return -1
  end
  return h
end

-- One holder kept in a hash with its owner (o), token (t) and, for an
-- election, value (v), expiring with its lease: a writer, a leader.
local function hash_holder(key)
  local h = {}
  function h.set(w, ttl, token, value)
    token = string.format('%.0f', token)
    if value then
      redis.call('HSET', key, 'o', w, 't', token, 'v', value)
    else
      redis.call('HSET', key, 'o', w, 't', token)
    end
    redis.call('PEXPIRE', key, ttl)
  end
  function h.token(owner)
    local v = redis.call('HMGET', key, 'o', 't')
    if v[1] ~= owner then
      return false
    end
    return tonumber(v[2] or '0')
  end
  function h.renew(ttl)
    redis.call('PEXPIRE', key, ttl)
  end
  function h.drop()
    redis.call('DEL', key)
  end
  function h.exists()
    return redis.call('EXISTS', key) == 1
  end
  function h.pttl()
    return redis.call('PTTL', key)
  end
  return h
end

-- Runs ARGV[1] on a kind of lock k, a table of functions:
--   cleanup()                   drop holders that expired
--   admit(tag)                  may a waiter of this tag take the lock now?
--   take(w, ttl, tag, value, token)   grant it
--   token(owner, tag)           owner's token if it holds, else false
--   renew(owner, tag, ttl)     push owner's expiry to ttl from now
--   drop(owner, tag)            release owner's hold
--   pttl()                      see the reply of try and wait
--   finish()                    (optional) runs before the script returns
local function run(k)
  local op, owner, ttl, fence_ttl, name, tag = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[8]
  local function finish(res)
    if k.finish then
      k.finish()
    end
    return res
  end
  k.cleanup()

  if op == 'renew' then
    if not k.token(owner, tag) then
      return 0
    end
    k.renew(owner, tag, ttl)
    return 1
  end

  local queued = redis.call('EXISTS', KEYS[3]) == 1
  if op == 'release' then
    if queued then
      dequeue(owner)
    end
    local held = k.token(owner, tag) ~= false
    if held then
      k.drop(owner, tag)
    end
    -- A waiter leaving (a writer at the head, say) may unblock the ones
    -- behind it, so the queue is served even when nothing was released.
    if queued then
      serve(k, name, fence_ttl, false)
    end
    return finish(held and 1 or 0)
  end

  -- try or wait. Already ours: a retried call, or a grant whose message
  -- was lost.
  local token = k.token(owner, tag)
  if token then
    k.renew(owner, tag, ttl)
    if queued then
      dequeue(owner)
    end
    return finish({1, token})
  end
  if queued then
    token = serve(k, name, fence_ttl, owner)
    if token then
      return finish({1, token})
    end
    queued = redis.call('EXISTS', KEYS[3]) == 1
  end
  -- Nobody queued ahead: take it if the kind allows.
  if not queued and k.admit(tag) then
    token = next_token(fence_ttl)
    local value = ''
    if tag == 'l' then
      value = ARGV[9]
    end
    k.take(owner, ttl, tag, value, token)
    return finish({1, token})
  end
  if op == 'wait' then
    local value = ''
    if tag == 'l' then
      value = ARGV[9]
    end
    enqueue(owner, ttl, tag, ARGV[6], tonumber(ARGV[7]), value)
  end
  return finish({0, k.pttl(), tonumber(redis.call('GET', KEYS[2]) or '0')})
end
