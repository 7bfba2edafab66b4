package redisutil

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
)

// ScanNames returns the names starting with prefix of the keys
// "<head><name>}<tail>" on the server c reaches (SCAN is per node): head
// is the backend's key prefix (and kind) and "{", tail "" for a lock's
// main key or another key's suffix (":r"). Other keys ("…}:fence") and
// names holding a brace are skipped. Lock names never hold Redis's glob
// characters (see dlock.ValidateName); a prefix that does is rejected
// with driver.ErrInvalidName.
func ScanNames(ctx context.Context, c redis.UniversalClient, head, tail, prefix string) ([]string, error) {
	if strings.ContainsAny(prefix, `*?[]\{}`) {
		return nil, fmt.Errorf("prefix %q: %w", prefix, driver.ErrInvalidName)
	}
	it := c.Scan(ctx, 0, head+prefix+"*}"+tail, 1000).Iterator()
	var names []string
	for it.Next(ctx) {
		rest, ok := strings.CutPrefix(it.Val(), head)
		if ok {
			rest, ok = strings.CutSuffix(rest, tail)
		}
		if !ok || !strings.HasSuffix(rest, "}") {
			continue
		}
		if name := rest[:len(rest)-1]; name != "" && !strings.ContainsAny(name, "{}") {
			names = append(names, name)
		}
	}
	return names, it.Err()
}

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
