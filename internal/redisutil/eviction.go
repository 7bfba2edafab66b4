package redisutil

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicy returns the server's maxmemory-policy and whether it may
// evict a lock's keys: every policy but noeviction. The volatile-*
// policies evict keys with a TTL, which every lock key has; the allkeys-*
// ones any key. A server without a maxmemory limit evicts nothing yet, but
// a limit can be set at run time (CONFIG SET maxmemory), so the policy
// alone is what counts. The error is the server's when it does not let the
// client read its configuration (CONFIG disabled or renamed, an ACL
// without +config).
func EvictionPolicy(ctx context.Context, c redis.Cmdable) (policy string, mayEvict bool, err error) {
	m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", false, err
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", false, fmt.Errorf("CONFIG GET maxmemory-policy returned %v", m)
	}
	return p, p != "noeviction", nil
}
