package redisutil

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holder is what the Redis backends' Inspect reads of a lock held by a
// key: the key's value (the owner), its remaining TTL and the lock's
// fencing counter.
type Holder struct {
	Owner string
	TTL   time.Duration // the key's PTTL: negative for no expiry
	Token uint64        // 0 without a counter
}

// ReadHolder queues on pipe the reads of the lock key lock and of its
// fencing counter fence ("" for none), and returns what reads their
// answers once pipe has run: false when the key is gone.
func ReadHolder(ctx context.Context, pipe redis.Pipeliner, lock, fence string) func() (Holder, bool) {
	owner, ttl := pipe.Get(ctx, lock), pipe.PTTL(ctx, lock)
	var token *redis.StringCmd
	if fence != "" {
		token = pipe.Get(ctx, fence)
	}
	return func() (Holder, bool) {
		o, err := owner.Result()
		if err != nil {
			return Holder{}, false
		}
		h := Holder{Owner: o, TTL: ttl.Val()}
		if token != nil {
			h.Token, _ = strconv.ParseUint(token.Val(), 10, 64)
		}
		return h, true
	}
}
