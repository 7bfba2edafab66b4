// Package redisfence fences writes to Redis with dlock's fencing tokens.
//
// A fenced key is a hash holding a value and the highest token that has
// written it ({value, token}). Set writes the value only when its token is
// at least the stored one, in one Lua script, so the check and the write
// are atomic on the server: a holder that was paused past its lock's TTL
// and comes back with an older token cannot overwrite its successor's
// value, and gets a *fence.StaleError (errors.Is(err, fence.ErrStale))
// naming both tokens.
//
//	err := redisfence.Set(ctx, rdb, "report:daily", body, lease.Token())
//	if errors.Is(err, fence.ErrStale) { /* a later holder has written */ }
//	value, token, err := redisfence.Get(ctx, rdb, "report:daily")
//
// Admit (and Guard, a fence.Guard) records only the token, for checks
// whose write happens elsewhere; on a key that Set also writes, both share
// the one token.
//
// Everything for one key lives in that one key, so it works unchanged on
// Redis Cluster. Scripts run with EVALSHA and fall back to EVAL when the
// server does not have them (after a restart or SCRIPT FLUSH). Tokens are
// compared exactly over the whole uint64 range.
//
// The guarantee is Redis's: a fenced key survives a restart only with
// persistence, and a failover to a replica that had not received the
// latest write can forget the highest token. Where that matters, keep the
// fenced data in a store that does not lose acknowledged writes.
package redisfence
