package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redispipe"
)

// Inspect lists the mutexes held now whose names start with prefix (all of
// them for an empty prefix), sorted by name, for tools such as
// `dlock status`: each with its owner value, its fencing token, its expiry
// (from the key's remaining TTL) and how many waiters are queued. It
// finds them with SCAN (on every master of a Redis Cluster), then reads
// each lock's keys in one pipeline; locks taken or released meanwhile may
// be missed or reported gone. Readers-writer locks, semaphores and
// elections are not listed.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		found, err := redispipe.ScanNames(ctx, c, d.prefix+"{", prefix)
		mu.Lock()
		names = append(names, found...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := d.client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, d.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)

	type reads struct {
		owner, token *redis.StringCmd
		pttl         *redis.DurationCmd
		waiters      *redis.IntCmd
	}
	rs := make([]reads, len(names))
	now := time.Now()
	pipe := d.client.Pipeline()
	for i, name := range names {
		k := d.keys(name)
		rs[i] = reads{pipe.Get(ctx, k[0]), pipe.Get(ctx, k[1]), pipe.PTTL(ctx, k[0]), pipe.LLen(ctx, k[2])}
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("redislock: inspect: %w", err)
		}
	}
	out := make([]driver.LockInfo, 0, len(names))
	for i, name := range names {
		owner, err := rs[i].owner.Result()
		if err != nil {
			continue // released since the scan
		}
		info := driver.LockInfo{Name: name, Mode: driver.Exclusive, Owner: owner, Waiters: int(rs[i].waiters.Val())}
		// The counter stands at the last token granted: the holder's.
		if t, err := strconv.ParseUint(rs[i].token.Val(), 10, 64); err == nil {
			info.Token = t
		}
		if ttl := rs[i].pttl.Val(); ttl > 0 {
			info.Expires = now.Add(ttl)
		}
		out = append(out, info)
	}
	return out, nil
}

var _ driver.Inspector = (*Driver)(nil)
