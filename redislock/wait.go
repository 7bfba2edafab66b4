package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// abandonTimeout bounds the clean-up of a Lock call that gives up: leaving
// the queue, and releasing a lock handed over meanwhile.
const abandonTimeout = 2 * time.Second

// drift is the clock-drift allowance taken off a lock's validity when it
// is measured from a message's arrival: 1% of the TTL plus 2ms.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// entryLifetime is how long a queue entry lives without a refresh, for a
// lock of the given TTL (see Options.QueueTTL).
func (d *Driver) entryLifetime(ttl time.Duration) time.Duration {
	return min(d.queueTTL, max(ttl, minQueueTTL))
}

// lazyTimer is a timer created on first use, so that a Lock call that
// never waits creates none; it lives on the caller's stack.
type lazyTimer struct{ t *time.Timer }

// after (re)arms the timer to fire after dur and returns its channel.
func (lt *lazyTimer) after(dur time.Duration) <-chan time.Time {
	if lt.t == nil {
		lt.t = time.NewTimer(dur)
	} else {
		lt.t.Reset(dur)
	}
	return lt.t.C
}

// stop stops the timer, if it was created.
func (lt *lazyTimer) stop() {
	if lt.t != nil {
		lt.t.Stop()
	}
}

// Lock takes the lock, waiting as long as ctx allows, first come first
// served among waiters. Readers, writers, permit holders and candidates
// wait the same way as the mutex's waiters, described here (see the
// package documentation, Lock kinds, for who is admitted when). In
// LayoutRedsync waiting is lockPlain's: no queue, no handoff.
//
// A waiter joins the lock's queue in the same script that finds the lock
// held. A release hands the lock straight to the first live waiter (it
// never falls free for the releaser or a newcomer to grab) and publishes
// the grant on that waiter's driver channel. The waiter also re-runs the
// script when the holder's TTL runs out (a crashed holder is taken over
// then) and at least every third of its entry lifetime, which keeps its
// queue entry alive and recovers a grant whose message was lost. That
// re-check (once a second per waiter by default) is the only periodic
// work; the lock itself arrives by handoff.
//
// When ctx ends first, Lock leaves the queue and releases a lock handed to
// it meanwhile, passing it on, and returns ctx's error; when the driver is
// closed meanwhile it does the same and returns driver.ErrClosed. If that
// clean-up cannot reach Redis, the error says so; the entry then expires
// after its lifetime and a handed-over lock after its TTL.
//
// The expiry of a lock received by message is the earlier of two bounds:
// its arrival plus the TTL less the drift allowance (1% of the TTL plus
// 2ms), and the sending of the last script that found the caller still
// queued plus the TTL (the handoff happened after that script ran).
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	_, ttl, err := ttlArg(r.TTL)
	if err != nil {
		return driver.Grant{}, err
	}
	if !d.enter() {
		return driver.Grant{}, driver.ErrClosed
	}
	defer d.active.Done()

	if err := d.checkMode(r); err != nil {
		return driver.Grant{}, err
	}
	if d.plain {
		return d.lockPlain(ctx, r, ttl)
	}
	var buf [4]string
	keys := d.keysOn(&buf, r)
	args := d.ttlArgs(ttl)
	life := d.entryLifetime(ttl)
	recheck := min(life, ttl) / 3
	var timer lazyTimer
	defer timer.stop()
	wait := timer.after

	// Subscribe and register before the first script: a grant may follow
	// it at once. It comes on the driver's channel, or on a Redis 7
	// Cluster on the name's shard channel.
	channel := d.entryChannel
	var ready <-chan struct{}
	ok := false
	if shard, _ := d.useShards(ctx); shard { // unknown: the own channel serves too
		ch := d.shardChannel(r.Name)
		var f follower
		if f, ok = d.subs.follow(d, ch, true, d.waiters.route); ok {
			defer f.leave()
			channel, ready = ch, f.ready
		}
	} else {
		ready, ok = d.subscribeOwn()
	}
	if !ok {
		return driver.Grant{}, driver.ErrClosed
	}
	grants, err := d.waiters.register(r.Owner)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.waiters.unregister(r.Owner)
	for {
		// A grant is missed only if it was published before the
		// subscription it comes by was confirmed; then the caller checks
		// again as soon as it is. What counts is whether it was confirmed
		// before this script was sent.
		subscribed := isClosed(ready)
		res, g, err := d.try(ctx, r, keys, args, ttl, true, channel)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		if !subscribed {
			if err := d.awaitSubscription(ctx, r, ready, wait(recheck)); err != nil {
				return driver.Grant{}, err
			}
			continue
		}

		// Queued: the holder has pttl left and the counter stood at seen.
		pttl, seen := res.pttl, res.seen
		next := recheck
		if pttl >= 0 {
			next = min(next, time.Duration(pttl+1)*time.Millisecond)
		}
		if g, ok, err := d.await(ctx, r, grants, wait(next), seen, res.sent.Add(ttl), ttl); ok || err != nil {
			return d.replicated(ctx, r, g, err)
		}
	}
}

// await waits for a grant message, the re-check timer, or the end of ctx
// or of the driver. It reports ok with the grant when a message brought
// one; !ok and no error mean: re-check now. A grant whose token is not
// above seen (the counter at the last check) is stale: it was sent before
// that check, which found the lock another's, so it has expired since.
func (d *Driver) await(ctx context.Context, r driver.Request, grants <-chan grantMsg, recheck <-chan time.Time,
	seen uint64, latest time.Time, ttl time.Duration) (driver.Grant, bool, error) {
	for {
		select {
		case m := <-grants:
			if m.token <= seen {
				continue
			}
			exp := m.at.Add(ttl - drift(ttl))
			if latest.Before(exp) {
				exp = latest
			}
			if !time.Now().Before(exp) {
				return driver.Grant{}, false, nil // too late to trust: re-check
			}
			return driver.Grant{Token: m.token, Expires: exp}, true, nil
		case <-recheck:
			return driver.Grant{}, false, nil
		case <-ctx.Done():
			return driver.Grant{}, false, d.abandon(ctx, r, ctx.Err())
		case <-d.done:
			return driver.Grant{}, false, d.abandon(ctx, r, driver.ErrClosed)
		}
	}
}

// awaitSubscription waits for the subscription the grant comes by (the
// driver's, or the name's shard channel's) to be confirmed (it may be
// already), or for timeout: waiting then goes on without it, by
// re-checks. When ctx ends or the driver closes first, it leaves the
// queue.
func (d *Driver) awaitSubscription(ctx context.Context, r driver.Request, ready <-chan struct{}, timeout <-chan time.Time) error {
	select {
	case <-ready:
	case <-timeout:
	case <-ctx.Done():
		return d.abandon(ctx, r, ctx.Err())
	case <-d.done:
		return d.abandon(ctx, r, driver.ErrClosed)
	}
	return nil
}

// abandon takes r out of the queue and releases the lock if r holds it
// (handed over meanwhile, or taken by a script whose reply was lost),
// passing it on; then it returns cause, joined with the clean-up's error if
// that failed. It runs even though ctx has ended.
func (d *Driver) abandon(ctx context.Context, r driver.Request, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	if _, err := d.release(ctx, r); err != nil {
		return errors.Join(cause, fmt.Errorf("redislock: leaving the queue of %q (the entry expires by itself): %w", r.Name, err))
	}
	return cause
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// enter counts a Lock call in, unless the driver is closed.
func (d *Driver) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return false
	}
	d.active.Add(1)
	return true
}
