-- The readers-writer lock.
--   KEYS[1] the writer: a hash (see hash_holder), expiring with its lease
--   KEYS[5] the readers' tokens: a hash owner -> token
--   KEYS[6] the readers: a sorted set of owners scored by expiry (ms)
-- ARGV as in kinds.lua; the tag is r or w.
--
-- Runs after lib.lua and kinds.lua.

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
  renew = function(owner, tag, ttl)
    if tag == 'w' then
      writer.renew(ttl)
    else
      readers.renew(owner, ttl)
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
