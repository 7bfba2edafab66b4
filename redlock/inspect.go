package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Inspect implements driver.Inspector as a quorum of the nodes sees the
// locks: a lock is listed when one owner holds its key on at least a
// quorum of the nodes that answered, with the counter most of them share
// as its token; Waiters is -1. It fails with an error wrapping
// driver.ErrNoQuorum when fewer than a quorum of the nodes answered. See
// docs/CLI.md, dlock status.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	views := make([]map[string]redisutil.Holder, len(d.clients)) // per node, by name
	replies := make([]reply, len(d.clients))
	now := time.Now()
	var wg sync.WaitGroup
	for i, c := range d.clients {
		wg.Go(func() {
			replies[i] = reply{node: i, val: int64(1)}
			names, err := redisutil.ScanNames(ctx, c, d.prefix+"{", "", prefix)
			if err != nil {
				replies[i].err = err
				return
			}
			reads := make([]func() (redisutil.Holder, bool), len(names))
			pipe := c.Pipeline()
			for k, name := range names {
				lock, fence := d.keys(name)
				reads[k] = redisutil.ReadHolder(ctx, pipe, lock, fence)
			}
			if len(names) > 0 {
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					replies[i].err = err
					return
				}
			}
			view := make(map[string]redisutil.Holder, len(names))
			for k, name := range names {
				if h, ok := reads[k](); ok { // else released since the scan
					view[name] = h
				}
			}
			views[i] = view
		})
	}
	wg.Wait()
	if t := count(replies); t.yes < d.quorum {
		return nil, d.noQuorum("inspect", "", t.yes, "answered", t.firstErr)
	}
	// The nodes' holders of each name by owner: an owner holding the key
	// on a quorum of nodes holds the lock.
	type holding struct{ name, owner string }
	held := map[holding][]redisutil.Holder{}
	for _, view := range views {
		for name, h := range view {
			k := holding{name, h.Owner}
			held[k] = append(held[k], h)
		}
	}
	var out []driver.LockInfo
	for k, rs := range held {
		if len(rs) < d.quorum {
			continue
		}
		info := driver.LockInfo{Name: k.name, Mode: driver.Exclusive, Owner: k.owner, Waiters: -1}
		ttls := make([]time.Duration, 0, len(rs))
		tokens := make([]uint64, 0, len(rs))
		for _, h := range rs {
			ttls = append(ttls, h.TTL)
			tokens = append(tokens, h.Token)
		}
		info.Token = grantToken(tokens)
		// Held on a quorum until the quorum-th longest TTL runs out.
		slices.SortFunc(ttls, func(a, b time.Duration) int { return int(b - a) })
		if ttl := ttls[d.quorum-1]; ttl > 0 {
			info.Expires = now.Add(ttl)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b driver.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// grantToken returns the fencing counter most of tokens share (on a
// tie, the highest): the grant's, which the grant wrote back to its
// quorum. A node whose acquire landed after the grant was decided also
// holds the owner's key, but under a counter of its own.
func grantToken(tokens []uint64) uint64 {
	slices.Sort(tokens)
	best, bestRun, run := tokens[0], 0, 0
	for i, t := range tokens {
		if i > 0 && t == tokens[i-1] {
			run++
		} else {
			run = 1
		}
		if run >= bestRun {
			best, bestRun = t, run
		}
	}
	return best
}
