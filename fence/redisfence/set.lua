-- Writes a value under a fencing token, unless a higher token has written.
-- KEYS[1]: the fenced key, a hash with fields "value" and "token".
-- ARGV[1]: the token, in decimal without leading zeros.
-- ARGV[2]: the value.
-- Returns 1 when written, else the stored (higher) token as a string.
-- Tokens are compared as decimal strings (shorter is smaller, then byte
-- order), which is exact over the whole uint64 range where Lua's numbers
-- (doubles) are not.
local cur = redis.call('HGET', KEYS[1], 'token')
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
	return cur
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
