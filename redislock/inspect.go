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

// Inspect lists the locks held now whose names start with prefix (all of
// them for an empty prefix), sorted by name, for tools such as
// `dlock status`: mutexes, readers-writer locks (the writer, or each
// reader), semaphores (each permit holder) and elections (the leader).
// Each entry has its owner value, its fencing token, its expiry (from the
// key's remaining TTL, or the holder's expiry score against the server's
// clock) and how many waiters are queued. It finds the locks with SCAN (on
// every master of a Redis Cluster), then reads their keys in one
// pipeline; locks taken or released meanwhile may be missed or reported
// gone. In LayoutRedsync see inspectPlain.
func (d *Driver) Inspect(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	if d.plain {
		return d.inspectPlain(ctx, prefix)
	}
	// What to scan for: a mutex or a writer, elections and semaphores by
	// their main key; readers by their sorted set (a readers-writer lock
	// held by readers has no main key).
	scans := []struct{ kind, tail string }{{"", ""}, {rwKind, ""}, {rwKind, ":r"}, {semaphoreKind, ""}, {electionKind, ""}}
	var (
		mu    sync.Mutex
		found = map[string][]string{} // kind -> names
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		for _, s := range scans {
			names, err := redisutil.ScanNames(ctx, c, d.prefix+s.kind+"{", s.tail, prefix)
			if err != nil {
				return err
			}
			mu.Lock()
			found[s.kind] = append(found[s.kind], names...)
			mu.Unlock()
		}
		return nil
	}
	if err := d.scanEach(ctx, scan); err != nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	var reads []func(now time.Time, serverMS int64) []driver.LockInfo
	pipe := d.client.Pipeline()
	for _, kind := range []string{"", rwKind, semaphoreKind, electionKind} {
		names := found[kind]
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			reads = append(reads, d.inspectOne(ctx, pipe, kind, name))
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	// The server's clock, for the expiry scores of readers and permit
	// holders. In a Redis Cluster it is one node's; the nodes' clocks are
	// assumed close.
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

// scanEach runs scan on the server, or on every master of a Redis
// Cluster (SCAN is per node).
func (d *Driver) scanEach(ctx context.Context, scan func(context.Context, redis.UniversalClient) error) error {
	if cc, ok := d.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, d.client)
}

// inspectPlain is Inspect in LayoutRedsync. The peers' keys are plain
// strings, which nothing tells from an application's other keys (under
// an empty prefix, all keys would qualify), so the names listed are those
// with a dlock fencing counter (dlock granted them in the last FenceTTL)
// whose lock key is held now, by dlock or a peer: Owner is the stored
// value (dlock's are 32 hex digits), Token 0 (the counter stands at
// dlock's last grant, which may not be the holder's), Waiters -1 (nothing
// records who polls).
func (d *Driver) inspectPlain(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	var mu sync.Mutex
	var names []string
	err := d.scanEach(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		found, err := redisutil.ScanNames(ctx, c, plainFenceHead+d.prefix, "", prefix)
		mu.Lock()
		names = append(names, found...)
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	pipe := d.client.Pipeline()
	owners := make([]*redis.StringCmd, len(names))
	pttls := make([]*redis.DurationCmd, len(names))
	for i, name := range names {
		lock, _ := d.plainKeys(name)
		owners[i], pttls[i] = pipe.Get(ctx, lock), pipe.PTTL(ctx, lock)
	}
	start := time.Now()
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redislock: inspect: %w", err)
	}
	var out []driver.LockInfo
	for i, name := range names {
		if o, err := owners[i].Result(); err == nil {
			out = append(out, driver.LockInfo{Name: name, Mode: driver.Exclusive, Owner: o,
				Expires: expiry(start, pttls[i].Val()), Waiters: -1})
		}
	}
	return out, nil
}

// inspectOne queues the reads of lock name of the given kind ("" for a
// mutex) on pipe, and returns what turns their answers into entries.
func (d *Driver) inspectOne(ctx context.Context, pipe redis.Pipeliner, kind, name string) func(time.Time, int64) []driver.LockInfo {
	if kind == "" {
		k := d.keys(name)
		owner, token, pttl, queue := pipe.Get(ctx, k[0]), pipe.Get(ctx, k[1]), pipe.PTTL(ctx, k[0]), pipe.LLen(ctx, k[2])
		return func(now time.Time, _ int64) []driver.LockInfo {
			o, err := owner.Result()
			if err != nil {
				return nil // released since the scan
			}
			// The counter stands at the last token granted: the holder's.
			t, _ := strconv.ParseUint(token.Val(), 10, 64)
			return []driver.LockInfo{{Name: name, Mode: driver.Exclusive, Owner: o, Token: t,
				Expires: expiry(now, pttl.Val()), Waiters: int(queue.Val())}}
		}
	}
	base := d.kindBase(kind, name)
	queue := pipe.LLen(ctx, base+":q")
	switch kind {
	case rwKind:
		// The writer's hash, or the readers' set and tokens.
		writer, pttl := pipe.HMGet(ctx, base, "o", "t"), pipe.PTTL(ctx, base)
		readers, tokens := pipe.ZRangeWithScores(ctx, base+":r", 0, -1), pipe.HGetAll(ctx, base+":t")
		return func(now time.Time, serverMS int64) []driver.LockInfo {
			waiters := int(queue.Val())
			if info, ok := holderHash(name, driver.Write, writer, pttl, now, waiters); ok {
				return []driver.LockInfo{info}
			}
			return scored(name, driver.Read, readers.Val(), tokens.Val(), now, serverMS, waiters)
		}
	case semaphoreKind:
		holders, tokens := pipe.ZRangeWithScores(ctx, base, 0, -1), pipe.HGetAll(ctx, base+":t")
		return func(now time.Time, serverMS int64) []driver.LockInfo {
			return scored(name, driver.Permit, holders.Val(), tokens.Val(), now, serverMS, int(queue.Val()))
		}
	default: // electionKind
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

var _ driver.Inspector = (*Driver)(nil)
