-- Shared functions, put in acquire.lua and release.lua where they say
-- --@lib (after their common paths, which need none of them), and before
-- (with kinds.lua) the kinds' scripts: the one copy of the fencing
-- counter's seeding and of the queue's handling.
--
-- Keys of one lock (one hash slot: they share the "{name}" tag):
--   KEYS[1] the lock: owner value, with the lease's expiry
--   KEYS[2] the fencing counter
--   KEYS[3] the wait queue: a list of owners, first come first served
--   KEYS[4] the queue entries: a hash owner -> "<deadline ms> <ttl ms> <channel>"

-- The server's clock in milliseconds (exact: below 2^53).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- next_token advances the fencing counter and returns the new token. A
-- missing counter (never used, expired, or lost in a restart without
-- persistence) is recreated by INCR as 1, and then seed_token seeds it
-- from the server's clock in microseconds, built as a string so no float
-- rounding is involved, with its expiry (fence_ttl ms), and returns the
-- token after the seed: INCR keeps a key's expiry, so only seeding sets
-- it. Tokens grow by one per acquisition, far slower than the clock, so a
-- reseeded counter is still above every token issued before.
local function seed_token(fence_ttl)
  local t = redis.call('TIME')
  redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])), 'PX', fence_ttl)
  return redis.call('INCR', KEYS[2])
end

local function next_token(fence_ttl)
  local token = redis.call('INCR', KEYS[2])
  if token == 1 then
    return seed_token(fence_ttl)
  end
  return token
end

-- The token of the lock the caller holds now: the counter's value, or a
-- fresh token if the counter has gone.
local function current_token(fence_ttl)
  local c = redis.call('GET', KEYS[2])
  if c then
    return tonumber(c)
  end
  return next_token(fence_ttl)
end

-- Removes owner's queue entry, if it has one.
local function dequeue(owner)
  if redis.call('HDEL', KEYS[4], owner) == 1 then
    redis.call('LREM', KEYS[3], 1, owner)
  end
end

-- The lock's name, for grant messages: KEYS[1] is "<prefix>{<name>}" and
-- neither a prefix nor a name holds a brace. Taken from the key rather
-- than passed, so that no call pays for an argument only a handoff uses.
local function lock_name()
  return string.sub(KEYS[1], string.find(KEYS[1], '{', 1, true) + 1, -2)
end

-- Sends a waiter its grant message on channel: by SPUBLISH when the
-- channel is a shard channel (its name holds the lock's hash tag, so it
-- lives in the lock's slot: on a Redis 7 Cluster only the slot's primary
-- and replicas carry it), by PUBLISH when it is a driver's own channel
-- (which holds no brace), which a cluster forwards to every node.
local function notify(channel, msg)
  if string.find(channel, '{', 1, true) then
    redis.call('SPUBLISH', channel, msg)
  else
    redis.call('PUBLISH', channel, msg)
  end
end

-- Gives the free lock to the first live waiter in the queue, dropping the
-- entries whose deadline has passed (their waiters stopped renewing
-- them). The new holder is told on its channel, unless it is self (the
-- caller, who learns from the reply). Returns the new holder and its
-- token, or false when no live waiter is left.
local function hand_off(fence_ttl, self)
  local now = nil
  while true do
    local w = redis.call('LPOP', KEYS[3])
    if not w then
      return false
    end
    local e = redis.call('HGET', KEYS[4], w)
    if e then
      redis.call('HDEL', KEYS[4], w)
      now = now or now_ms()
      local deadline, ttl, channel = string.match(e, '^(%d+) (%d+) (.+)$')
      if deadline and tonumber(deadline) >= now then
        redis.call('SET', KEYS[1], w, 'PX', ttl)
        local token = next_token(fence_ttl)
        if w ~= self then
          notify(channel, string.format('%.0f', token) .. ' ' .. w .. ' ' .. lock_name())
        end
        return w, token
      end
    end
  end
end
