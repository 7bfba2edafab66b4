-- The semaphore.
--   KEYS[1] the holders: a sorted set of owners scored by expiry (ms)
--   KEYS[5] the holders' tokens: a hash owner -> token
-- ARGV as in kinds.lua; the tag is p and ARGV[9] the limit (the caller's:
-- every user of a semaphore passes the same).
--
-- Runs after lib.lua and kinds.lua.

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
  renew = function(owner, _, ttl)
    holders.renew(owner, ttl)
  end,
  drop = function(owner)
    holders.drop(owner)
  end,
  pttl = holders.pttl,
})
