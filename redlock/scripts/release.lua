-- Deletes the lock on one node if the caller holds it there and, if asked,
-- tells the node's subscribers that the name may be free.
--
-- KEYS[1] the lock          KEYS[2] the fencing counter (unused; same slot)
-- ARGV[1] owner             ARGV[2] release channel, or "" for no message
-- ARGV[3] the lock's name (the message)
--
-- Returns 1 when the caller held the lock here, 0 otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
