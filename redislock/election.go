package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// observeRetry bounds how long an observer waits before reading the
// leader again after a failed read.
const observeRetry = time.Second

// Leader returns the current leader of election name, with its value and
// token, in one script; the zero LeaderInfo when nobody leads. In
// LayoutRedsync it fails with an error matching driver.ErrUnsupported.
func (d *Driver) Leader(ctx context.Context, name string) (driver.LeaderInfo, error) {
	if d.closed.Load() {
		return driver.LeaderInfo{}, driver.ErrClosed
	}
	if !d.Supports(driver.Leader) {
		return driver.LeaderInfo{}, d.format.unsupported("election", name)
	}
	info, _, err := d.readLeader(ctx, name)
	return info, err
}

// readLeader reads the leader of election name and how long its lease has
// left (-1 when unknown or nobody leads).
func (d *Driver) readLeader(ctx context.Context, name string) (driver.LeaderInfo, time.Duration, error) {
	res, err := d.run(ctx, leaderScript, []string{d.base(leaderKind, name)}).Slice()
	if err != nil {
		return driver.LeaderInfo{}, -1, fmt.Errorf("redislock: leader of %q: %w", name, err)
	}
	if len(res) != 3 {
		return driver.LeaderInfo{}, -1, fmt.Errorf("redislock: leader of %q: unexpected reply %v", name, res)
	}
	value, _ := res[0].(string)
	tok, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	if tok == "" {
		return driver.LeaderInfo{}, -1, nil
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return driver.LeaderInfo{}, -1, fmt.Errorf("redislock: leader of %q: bad token %q", name, tok)
	}
	left := time.Duration(-1)
	if pttl >= 0 {
		left = time.Duration(pttl) * time.Millisecond
	}
	return driver.LeaderInfo{Value: value, Token: token}, left, nil
}

// Observe follows election name: the returned channel gets the current
// leader, then every change, re-read on each message of the election's
// channel and at the last seen leader's expiry (see Lock kinds in
// docs/REDIS.md). It reads the leader once before returning, failing if
// that fails; a later failed read is retried within a second. The channel
// is closed when ctx ends or the driver closes. In LayoutRedsync Observe
// fails with an error matching driver.ErrUnsupported.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	if !d.Supports(driver.Leader) {
		return nil, d.format.unsupported("election", name)
	}
	if !d.enter() {
		return nil, driver.ErrClosed
	}
	shard, err := d.useShards(ctx)
	if err != nil {
		d.active.Done()
		return nil, fmt.Errorf("redislock: observe %q: %w", name, err)
	}
	f, ok := d.subs.follow(d, d.electionChannel(name), shard, nil)
	if !ok {
		d.active.Done()
		return nil, driver.ErrClosed
	}
	info, left, err := d.readLeader(ctx, name)
	if err != nil {
		f.leave()
		d.active.Done()
		return nil, err
	}
	out := make(chan driver.LeaderInfo)
	go func() {
		defer d.active.Done()
		defer close(out)
		defer f.leave()
		d.observe(ctx, name, out, f.signal, info, left)
	}()
	return out, nil
}

// observe feeds out until ctx ends or the driver closes, starting with
// first, whose lease had left to run (-1: unknown, or no leader).
func (d *Driver) observe(ctx context.Context, name string, out chan<- driver.LeaderInfo, signal <-chan struct{},
	first driver.LeaderInfo, left time.Duration) {
	var timer lazyTimer
	defer timer.stop()
	var expiry <-chan time.Time
	if left >= 0 {
		expiry = timer.after(left + time.Millisecond)
	}
	// latest is the leader last read, sent the last value the reader
	// took; latest waits to be sent while they differ (and until the first
	// is sent): the reader gets the latest, never one twice in a row.
	latest, sent, started, pending := first, driver.LeaderInfo{}, false, true
	for {
		var send chan<- driver.LeaderInfo
		if pending {
			send = out
		}
		select {
		case send <- latest:
			sent, started, pending = latest, true, false
			continue
		case <-signal:
		case <-expiry:
		case <-ctx.Done():
			return
		case <-d.done:
			return
		}
		info, left, err := d.readLeader(ctx, name)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			expiry = timer.after(observeRetry)
			continue
		case left >= 0:
			expiry = timer.after(left + time.Millisecond)
		default:
			expiry = nil
		}
		latest = info
		if started {
			pending = sent != info
		}
	}
}
