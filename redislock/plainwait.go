package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// lockPlain is Lock in LayoutRedsync, where redsync's and bsm/redislock's
// clients share the lock: they poll for it, and their releases announce
// nothing. There is no queue and no handoff (a queue that handed the key
// to dlock's waiters would keep it from the peers' waiters for as long as
// dlock's kept coming): each attempt is TryLock's SET NX, and a waiter
// tries again
//
//   - when a dlock release of the lock announces itself on the lock's
//     channel (plainChannel), which the Driver follows while any of its
//     calls waits for the name;
//   - when the holder's TTL, read by the failed attempt, runs out, which
//     is when a crashed holder's lock, or a peer's, falls free;
//   - after pollDelay (PollInterval on average), which is how a peer's
//     release is noticed.
//
// The first attempt is made before subscribing, so a lock that is free
// costs one script. A release is missed only if it came before the
// subscription was confirmed; so an attempt that fails before then waits
// for the confirmation, and tries again at once.
//
// When ctx ends or the driver closes, nothing is held or queued: Lock
// returns ctx's error or driver.ErrClosed. When an attempt fails on an
// error (its outcome unknown), the lock is released in case it took it.
func (d *Driver) lockPlain(ctx context.Context, r driver.Request, ttl time.Duration) (driver.Grant, error) {
	var buf [4]string
	keys := d.keysOn(&buf, r)
	args := d.ttlArgs(ttl)
	var timer lazyTimer
	defer timer.stop()
	var f follower // the lock's channel, followed from the first failed attempt
	for {
		confirmed := f.ready != nil && isClosed(f.ready)
		if confirmed {
			// A signal left from before this attempt is spent by it.
			select {
			case <-f.signal:
			default:
			}
		}
		res, g, err := d.try(ctx, r, keys, args, ttl, false, nil)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		if f.leave == nil {
			shard, _ := d.useShards(ctx) // unknown: SUBSCRIBE, and the timers if releases come by SPUBLISH
			var ok bool
			if f, ok = d.subs.follow(d, d.plainChannel(r.Name), shard, nil); !ok {
				return driver.Grant{}, driver.ErrClosed
			}
			defer f.leave()
		}
		wake := f.signal
		if !confirmed {
			wake = f.ready
		}
		next := d.pollDelay()
		if res.pttl >= 0 {
			next = min(next, time.Duration(res.pttl+1)*time.Millisecond)
		}
		select {
		case <-wake:
		case <-timer.after(next):
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		}
	}
}
