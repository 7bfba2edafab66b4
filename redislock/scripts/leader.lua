-- Reads an election's leader.
--
-- KEYS[1] the leader (see election.lua)
--
-- Returns {value, token, pttl ms}; value and token are false without a
-- leader.
local v = redis.call('HMGET', KEYS[1], 'v', 't')
return {v[1], v[2], redis.call('PTTL', KEYS[1])}
