package redisutil

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// EvictionPolicy returns the server's maxmemory-policy and whether it may
// evict a lock's keys: every policy but noeviction (volatile-* evict keys
// with a TTL, as every lock key has). A server without a maxmemory limit
// evicts nothing yet, but a limit can be set at run time, so the policy
// alone counts. The error is the server's when it does not let the client
// read its configuration (CONFIG disabled or renamed, an ACL without
// +config).
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

// CheckTimeout bounds a background read of a server's configuration:
// long enough for a first dial and TLS handshake, as Redlock's node
// timeout may not be; a shorter bound would also cost the client its new
// connection, which go-redis drops when its first request times out.
const CheckTimeout = 5 * time.Second

// Evicting reads the policy of every server of clients at once, each
// within timeout (a Cluster client stands for its primaries), and
// returns "<policy> on <address>" for each that may evict lock keys, in
// the clients' order. unread is told of each server (or cluster) whose
// policy could not be read, unless ctx was cancelled; calls to it are
// not concurrent.
func Evicting(ctx context.Context, clients []redis.UniversalClient, timeout time.Duration,
	unread func(addr string, err error)) []string {
	var mu sync.Mutex
	found := make([][]string, len(clients))
	read := func(ctx context.Context, i int, addr string, c redis.Cmdable) error {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		p, evicts, err := EvictionPolicy(rctx, c)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && errors.Is(ctx.Err(), context.Canceled):
		case err != nil:
			unread(addr, err)
		case evicts:
			found[i] = append(found[i], p+" on "+addr)
		}
		return nil
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			cc, isCluster := c.(*redis.ClusterClient)
			rc, isClient := c.(*redis.Client)
			switch {
			case isCluster:
				err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
					return read(ctx, i, n.Options().Addr, n)
				})
				if err != nil && !errors.Is(ctx.Err(), context.Canceled) {
					mu.Lock()
					unread("the cluster's primaries", err)
					mu.Unlock()
				}
				slices.Sort(found[i])
			case isClient:
				_ = read(ctx, i, rc.Options().Addr, rc)
			case len(clients) == 1:
				_ = read(ctx, i, "the server", c)
			default:
				_ = read(ctx, i, fmt.Sprintf("node %d", i), c)
			}
		})
	}
	wg.Wait()
	return slices.Concat(found...)
}
