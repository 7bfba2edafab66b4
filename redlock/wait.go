package redlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Bounds of the random pauses Lock takes before an attempt, so that
// contenders do not retry in step and split the vote again.
const (
	minSpread = time.Millisecond
	maxSpread = 100 * time.Millisecond
)

// Lock takes the lock, waiting as long as ctx allows. It never polls on a
// fixed interval. After a failed attempt it waits for one of:
//
//   - a release message for the name from any node (every Unlock
//     publishes one on each node where it deleted the lock), then a short
//     random pause, so that the waiters woken together spread out;
//   - when another owner holds a quorum, that owner's shortest remaining
//     TTL, in case it died without releasing;
//   - when nobody holds a quorum (a split vote between contenders, or a
//     holder behind nodes that did not answer), a random pause that grows
//     with each such attempt in a row.
//
// When ctx ends first, Lock returns ctx's error and holds nothing: every
// attempt undoes itself on every node before it returns. An attempt that
// too few nodes answered counts as a miss, up to maxNoQuorum in a row,
// after which Lock returns its error (wrapping driver.ErrNoQuorum); any
// other error but "held by another owner" ends the wait at once.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	var (
		w        *waiter // nil until the lock is found held
		timer    *time.Timer
		misses   int // attempts in a row that saw no holder with a quorum
		noQuorum int // attempts in a row that too few nodes answered
	)
	defer func() {
		if w != nil {
			d.sub.unwatch(w)
		}
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		start := time.Now()
		g, o, err := d.acquire(ctx, r)
		if errors.Is(err, driver.ErrNoQuorum) {
			noQuorum++
		} else {
			noQuorum = 0
		}
		if done, err := d.settled(ctx, err, noQuorum); done {
			return g, err
		}
		if w == nil && noQuorum == 0 {
			// Held: watch for its release. Watching begins after this
			// attempt, and a release in between would go unnoticed, so
			// try again at once.
			if w, err = d.sub.watch(ctx, r.Name); err != nil {
				return driver.Grant{}, err
			}
			continue
		}
		if timer == nil {
			timer = time.NewTimer(time.Hour)
		}
		took := time.Since(start)
		spread := spreadWindow(took, misses)
		var delay time.Duration
		if o.rival >= d.quorum {
			misses = 0
			delay = o.remaining
			if delay <= 0 {
				delay = r.TTL
			}
			delay += rand.N(spread)
		} else {
			misses++
			delay = rand.N(spreadWindow(took, misses))
			if o.remaining > 0 {
				delay = min(delay, o.remaining)
			}
		}
		var wake <-chan struct{} // nil, which never fires, until watching
		if w != nil {
			wake = w.wake
		}
		timer.Reset(delay)
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-timer.C:
			continue
		case <-wake:
		}
		// Released: everyone waiting heard it at once.
		timer.Reset(rand.N(spread))
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-timer.C:
		}
		select { // the other nodes' messages for the same release
		case <-wake:
		default:
		}
	}
}

// maxNoQuorum is how many attempts in a row that too few nodes answered
// Lock makes before it gives up with their error: enough to ride out a
// slow moment (a cold connection pool, a pause), few enough that a lost
// quorum is reported within a fraction of a second.
const maxNoQuorum = 4

// settled reports whether an attempt's result ends Lock, and with what
// error: success, ctx's end, the maxNoQuorum-th attempt in a row without
// a quorum of answers, or any other error but "held by another owner".
func (d *Driver) settled(ctx context.Context, err error, noQuorum int) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return true, ctx.Err()
	case errors.Is(err, driver.ErrNotAcquired):
		return false, nil
	case errors.Is(err, driver.ErrNoQuorum) && noQuorum < maxNoQuorum:
		return false, nil
	}
	return true, err
}

// spreadWindow is the span of a random pause: a millisecond plus twice
// the attempt's duration (so that contenders' attempts rarely overlap),
// doubled for each miss in a row, up to maxSpread.
func spreadWindow(took time.Duration, misses int) time.Duration {
	w := minSpread + 2*took
	for range min(misses, 8) {
		w *= 2
	}
	return min(w, maxSpread)
}
