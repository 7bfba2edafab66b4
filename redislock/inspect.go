package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/redisutil"
)

// Inspect implements driver.Inspector, for every kind, one entry per
// holder, found with SCAN (on every master of a Redis Cluster) and read in
// one pipeline; locks taken or released meanwhile may be missed or
// reported gone. In LayoutRedsync it lists only the names with a dlock
// fencing counter whose lock key is held now, with Token 0 and Waiters -1.
// See docs/CLI.md, dlock status, and docs/REDIS.md.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	// What to scan for: each kind's main key, and the readers' sorted set
	// (a readers-writer lock held by readers has no main key).
	kinds := d.format.listed
	var mu sync.Mutex
	found := make([][]string, len(kinds)) // by kind
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		for i, k := range kinds {
			tails := []string{""}
			if k == writeKind {
				tails = append(tails, ":r")
			}
			for _, tail := range tails {
				names, err := redisutil.ScanNames(ctx, c, k.scanHead(d.prefix), tail, prefix)
				if err != nil {
					return err
				}
				mu.Lock()
				found[i] = append(found[i], names...)
				mu.Unlock()
			}
		}
		return nil
	}
	if cc, ok := d.client.(*redis.ClusterClient); ok { // SCAN is per node
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
		if err != nil {
			return nil, fmt.Errorf("redislock: inspect: %w", err)
		}
	} else if err := scan(ctx, d.client); err != nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	var reads []func(now time.Time, serverMS int64) []driver.LockInfo
	pipe := d.client.Pipeline()
	for i, k := range kinds {
		slices.Sort(found[i])
		for _, name := range slices.Compact(found[i]) {
			reads = append(reads, d.inspectOne(ctx, pipe, k, name))
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	// The server's clock, for the expiry scores of readers and permit
	// holders: in a Redis Cluster one node's, the clocks assumed close.
	clock := pipe.Time(ctx)
	start := time.Now()
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	serverNow, err := clock.Result()
	if err != nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	var out []driver.LockInfo
	for _, read := range reads {
		out = append(out, read(start, serverNow.UnixMilli())...)
	}
	slices.SortStableFunc(out, func(a, b driver.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// inspectOne queues the reads of lock name of kind k on pipe, and returns
// what turns their answers into entries.
func (d *Driver) inspectOne(ctx context.Context, pipe redis.Pipeliner, k *kind, name string) func(time.Time, int64) []driver.LockInfo {
	keys := k.keys(d.prefix, name)
	if k == plainMutex || k == mutexKind {
		// The counter stands at the last token granted: the holder's, in
		// LayoutDlock; in LayoutRedsync dlock's last grant, so none.
		fence, queue := "", (*redis.IntCmd)(nil)
		if k == mutexKind {
			fence, queue = keys[1], pipe.LLen(ctx, keys[2])
		}
		read := redisutil.ReadHolder(ctx, pipe, keys[0], fence)
		return func(now time.Time, _ int64) []driver.LockInfo {
			h, ok := read()
			if !ok {
				return nil // released since the scan
			}
			info := driver.LockInfo{Name: name, Mode: driver.Exclusive, Owner: h.Owner, Token: h.Token,
				Expires: expiry(now, h.TTL), Waiters: -1}
			if queue != nil {
				info.Waiters = int(queue.Val())
			}
			return []driver.LockInfo{info}
		}
	}
	base := keys[0]
	queue := pipe.LLen(ctx, keys[2])
	switch k {
	case writeKind:
		// The writer's hash, or the readers' set and tokens.
		writer, pttl := pipe.HMGet(ctx, base, "o", "t"), pipe.PTTL(ctx, base)
		readers, tokens := pipe.ZRangeWithScores(ctx, keys[5], 0, -1), pipe.HGetAll(ctx, keys[4])
		return func(now time.Time, serverMS int64) []driver.LockInfo {
			waiters := int(queue.Val())
			if info, ok := holderHash(name, driver.Write, writer, pttl, now, waiters); ok {
				return []driver.LockInfo{info}
			}
			return scored(name, driver.Read, readers.Val(), tokens.Val(), now, serverMS, waiters)
		}
	case permitKind:
		holders, tokens := pipe.ZRangeWithScores(ctx, base, 0, -1), pipe.HGetAll(ctx, keys[4])
		return func(now time.Time, serverMS int64) []driver.LockInfo {
			return scored(name, driver.Permit, holders.Val(), tokens.Val(), now, serverMS, int(queue.Val()))
		}
	default: // leaderKind
		leader, pttl := pipe.HMGet(ctx, base, "o", "t"), pipe.PTTL(ctx, base)
		return func(now time.Time, _ int64) []driver.LockInfo {
			if info, ok := holderHash(name, driver.Leader, leader, pttl, now, int(queue.Val())); ok {
				return []driver.LockInfo{info}
			}
			return nil
		}
	}
}

// holderHash turns a holder's hash (owner "o", token "t"; see hash_holder
// in kinds.lua) into an entry; false when nobody holds it.
func holderHash(name string, mode driver.Mode, h *redis.SliceCmd, pttl *redis.DurationCmd, now time.Time, waiters int) (driver.LockInfo, bool) {
	v := h.Val()
	if len(v) != 2 || v[0] == nil {
		return driver.LockInfo{}, false
	}
	o, _ := v[0].(string)
	ts, _ := v[1].(string)
	t, _ := strconv.ParseUint(ts, 10, 64)
	return driver.LockInfo{Name: name, Mode: mode, Owner: o, Token: t, Expires: expiry(now, pttl.Val()), Waiters: waiters}, true
}

// scored turns a set of holders scored by their expiry on the server's
// clock (milliseconds) into entries, skipping those expired but not yet
// cleaned up.
func scored(name string, mode driver.Mode, holders []redis.Z, tokens map[string]string, now time.Time, serverMS int64, waiters int) []driver.LockInfo {
	var out []driver.LockInfo
	for _, z := range holders {
		left := int64(z.Score) - serverMS
		if left <= 0 {
			continue
		}
		o, _ := z.Member.(string)
		t, _ := strconv.ParseUint(tokens[o], 10, 64)
		out = append(out, driver.LockInfo{Name: name, Mode: mode, Owner: o, Token: t,
			Expires: now.Add(time.Duration(left) * time.Millisecond), Waiters: waiters})
	}
	return out
}

// expiry converts a PTTL reply into a time: zero for a key without one.
func expiry(now time.Time, pttl time.Duration) time.Time {
	if pttl <= 0 {
		return time.Time{}
	}
	return now.Add(pttl)
}
