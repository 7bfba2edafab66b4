-- The election: a mutex whose holder's value observers can read.
--   KEYS[1] the leader: a hash (see hash_holder) with its value, expiring
--           with its lease
-- ARGV as in kinds.lua; the tag is l, ARGV[9] the candidate's value and
-- ARGV[10] the channel on which every change of leader is announced (a
-- grant, a resignation; not a renewal), so that observers read it again.
--
-- The common cases come first, written out as in rw.lua (see there why):
-- taking the lead when nobody leads or is queued, refreshing, and
-- resigning with nobody queued. Each leaves the keys, and announces, as
-- the full path would; a case they do not cover falls through to it
-- having changed nothing. A grant replies with the bare token.
local op, owner = ARGV[1], ARGV[2]
if op == 'refresh' then
  -- The full path has nothing to clean up first: the leader's key
  -- expires by itself.
  if redis.call('HGET', KEYS[1], 'o') ~= owner then
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
elseif op == 'release' then
  if redis.call('EXISTS', KEYS[3]) == 0 then
    if redis.call('HGET', KEYS[1], 'o') ~= owner then
      return 0
    end
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[10], 'changed')
    return 1
  end
elseif redis.call('EXISTS', KEYS[3], KEYS[1]) == 0 then
  local token = redis.call('INCR', KEYS[2])
  if token == 1 then
    -- A new counter: seed it (see next_token in lib.lua).
    local t = redis.call('TIME')
    redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', ARGV[4])
    token = redis.call('INCR', KEYS[2])
  end
  redis.call('HSET', KEYS[1], 'o', owner, 't', string.format('%.0f', token), 'v', ARGV[9])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PUBLISH', ARGV[10], 'changed')
  return token
end

-- @lib

local leader = hash_holder(KEYS[1])
local changed = false

return run({
  cleanup = function() end,
  admit = function()
    return not leader.exists()
  end,
  take = function(w, ttl, _, value, token)
    leader.set(w, ttl, token, value)
    changed = true
  end,
  token = function(owner)
    return leader.token(owner)
  end,
  extend = function(_, _, ttl)
    leader.extend(ttl)
  end,
  drop = function()
    leader.drop()
    changed = true
  end,
  pttl = leader.pttl,
  finish = function()
    if changed then
      redis.call('PUBLISH', ARGV[10], 'changed')
    end
  end,
})
