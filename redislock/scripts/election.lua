-- The election: a mutex whose holder's value observers can read.
--   KEYS[1] the leader: a hash (see hash_holder) with its value, expiring
--           with its lease
-- ARGV as in kinds.lua; the tag is l, ARGV[9] the candidate's value,
-- ARGV[10] the channel on which every change of leader is announced (a
-- grant, a resignation; not a renewal), so that observers read it again,
-- and ARGV[11] "s" when that is a shard channel (a Redis 7 Cluster).
--
-- Runs after lib.lua and kinds.lua.

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
  renew = function(_, _, ttl)
    leader.renew(ttl)
  end,
  drop = function()
    leader.drop()
    changed = true
  end,
  pttl = leader.pttl,
  finish = function()
    if changed then
      redis.call(ARGV[11] == 's' and 'SPUBLISH' or 'PUBLISH', ARGV[10], 'changed')
    end
  end,
})
