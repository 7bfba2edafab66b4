-- Admits a fencing token: records it unless a higher one was recorded.
-- KEYS[1]: the fenced key, a hash whose field "token" holds the highest
-- token (its "value" field, if Set wrote one, is left alone).
-- ARGV[1]: the token, in decimal without leading zeros.
-- Returns 1 when admitted, else the stored (higher) token as a string.
-- See set.lua for the comparison.
local cur = redis.call('HGET', KEYS[1], 'token')
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
	return cur
end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return 1
