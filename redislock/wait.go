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

// entryLifetime is how long a queue entry lives without a renew, for a
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

func (lt *lazyTimer) stop() {
	if lt.t != nil {
		lt.t.Stop()
	}
}

// Lock takes the lock, waiting as long as ctx allows, first come first
// served: a first attempt takes a free lock as TryLock does; if it is
// held, the waiter joins the lock's queue in Redis and is handed the lock
// by a release (see Waiting and Lock kinds in docs/REDIS.md; in
// LayoutRedsync, lockPlain). When ctx ends or the driver closes first, Lock
// cleans up (see abandon) and returns ctx's error or driver.ErrClosed; if
// the clean-up cannot reach Redis, the error says so, and the entry expires
// after its lifetime and a handed-over lock after its TTL.
//
// A lock received by message expires at the earlier of its arrival plus
// the TTL less drift, and the sending of the last script that found the
// caller still queued plus the TTL (the handoff came after that script).
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	q, err := d.resolve(r, true)
	if err != nil {
		return driver.Grant{}, err
	}
	if !d.enter() {
		return driver.Grant{}, driver.ErrClosed
	}
	defer d.active.Done()
	var timer lazyTimer
	defer timer.stop()
	if q.kind.plain {
		return d.lockPlain(ctx, &q, &timer)
	}
	// A first attempt that does not queue: a free lock costs one script
	// that touches no queue key, and no subscription.
	if _, g, err := d.try(ctx, &q, opTry, nil); err == nil || !errors.Is(err, driver.ErrNotAcquired) {
		return g, err
	}
	recheck := min(d.entryLifetime(q.ttl), q.ttl) / 3
	wait := timer.after

	// Held: subscribe and register before the first script that queues: a
	// grant may follow it at once. It comes on the driver's channel, or on
	// a Redis 7 Cluster on the name's shard channel.
	channel := d.channelArg
	var ready <-chan struct{}
	ok := false
	if shard, _ := d.useShards(ctx); shard { // unknown: the own channel serves too
		ch := d.shardChannel(q.Name)
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
	grants, err := d.waiters.register(q.Owner)
	if err != nil {
		return driver.Grant{}, err
	}
	defer d.waiters.unregister(q.Owner)
	for {
		// A grant is missed only if published before its subscription
		// was confirmed, so unless that was before this script was sent,
		// the caller checks again as soon as it is.
		subscribed := isClosed(ready)
		res, g, err := d.try(ctx, &q, opWait, channel)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		if !subscribed {
			if err := d.awaitSubscription(ctx, &q, ready, wait(recheck)); err != nil {
				return driver.Grant{}, err
			}
			continue
		}
		// Queued: the holder has res.pttl left, the counter stood at res.seen.
		next := recheck
		if res.pttl >= 0 {
			next = min(next, res.remaining(1))
		}
		if g, ok, err := d.await(ctx, &q, grants, wait(next), res); ok || err != nil {
			if err != nil {
				return g, err
			}
			return d.replicated(ctx, &q, g)
		}
	}
}

// lockPlain is Lock in LayoutRedsync: no queue, no handoff (see Waiting
// under Layouts in docs/REDIS.md). Each attempt is TryLock's, retried on a
// dlock release on plainChannel, at the holder's expiry, and after
// pollDelay. The first attempt comes before subscribing, so a free lock
// costs one script; as a release is missed only if it came before the
// subscription was confirmed, a failed attempt before then waits for the
// confirmation and tries again.
func (d *Driver) lockPlain(ctx context.Context, q *lockReq, timer *lazyTimer) (driver.Grant, error) {
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
		res, g, err := d.try(ctx, q, opTry, nil)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		if f.leave == nil {
			shard, _ := d.useShards(ctx) // unknown: SUBSCRIBE, and the timers if releases come by SPUBLISH
			var ok bool
			if f, ok = d.subs.follow(d, d.plainChannel(q.Name), shard, nil); !ok {
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
			next = min(next, res.remaining(1))
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

// await waits for a grant message, the re-check timer, or the end of ctx
// or of the driver; ok with the grant when a message brought one, !ok and
// no error meaning: re-check now. A grant whose token is not above
// last.seen (the counter at the last check) is stale: sent before that
// check, which found the lock another's.
func (d *Driver) await(ctx context.Context, q *lockReq, grants <-chan grantMsg, recheck <-chan time.Time,
	last attempt) (driver.Grant, bool, error) {
	latest := last.sent.Add(q.ttl)
	for {
		select {
		case m := <-grants:
			if m.token <= last.seen {
				continue
			}
			exp := m.at.Add(q.ttl - drift(q.ttl))
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
			return driver.Grant{}, false, d.abandon(ctx, q, ctx.Err())
		case <-d.done:
			return driver.Grant{}, false, d.abandon(ctx, q, driver.ErrClosed)
		}
	}
}

// awaitSubscription waits for the subscription the grant comes by to be
// confirmed, or for timeout: waiting then goes on by re-checks. When ctx
// ends or the driver closes first, it leaves the queue.
func (d *Driver) awaitSubscription(ctx context.Context, q *lockReq, ready <-chan struct{}, timeout <-chan time.Time) error {
	select {
	case <-ready:
	case <-timeout:
	case <-ctx.Done():
		return d.abandon(ctx, q, ctx.Err())
	case <-d.done:
		return d.abandon(ctx, q, driver.ErrClosed)
	}
	return nil
}

// abandon takes q out of the queue and releases the lock, passing it on,
// if q holds it (handed over meanwhile, or taken by a script whose reply
// was lost), even though ctx has ended; it returns cause, joined with the
// clean-up's error.
func (d *Driver) abandon(ctx context.Context, q *lockReq, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	if _, err := d.release(ctx, q); err != nil {
		return errors.Join(cause, fmt.Errorf("redislock: leaving the queue of %q (the entry expires by itself): %w", q.Name, err))
	}
	return cause
}

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
