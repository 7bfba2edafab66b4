package filelock

import (
	"context"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// Bounds of the backstop, a waiter's sleep between attempts. A wake-up
// (see Lock) makes it try at once, the delay reset to minBackstop; it then
// doubles up to maxBackstop, or maxBackstopBlind without the kernel
// watcher (no inotify, or its limits reached). Tests lengthen them
// (SetBackstop).
var (
	minBackstop      = time.Millisecond
	maxBackstop      = time.Second
	maxBackstopBlind = 250 * time.Millisecond
)

// Lock implements driver.Waiter. It never blocks in flock(2), which no
// context can interrupt: it tries flock(LOCK_NB) whenever it may succeed,
// on a release in this process, on the kernel's report (inotify, on
// Linux) that the lock file was closed, removed or replaced, and on a
// backstop timer (see docs/FILE.md, Waiting). Waiters are not served in
// order, but within one process a Lock call does not overtake a waiter of
// more than starveAfter. When ctx ends, Lock returns ctx's error at once,
// leaving nothing held or queued: the waiter only held an open file.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	a, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	defer a.close()
	yield := a.gatePath == "" && starving(a.path, time.Now())
	if !yield {
		why, g, err := a.step(ctx)
		if err != nil || why == stepTaken {
			return g, err
		}
	}

	d.mu.Lock()
	closed := d.closed
	if !closed && !d.watching {
		// The watcher lives while the driver does, not per acquisition.
		d.watching = watchProcess()
	}
	d.mu.Unlock()
	if closed {
		return driver.Grant{}, driver.ErrClosed
	}
	w := addWaiter(a.path, d.dir)
	defer removeWaiter(w)
	events, gateWake := w.events, (<-chan struct{})(nil)
	if a.gatePath != "" {
		wg := addWaiter(a.gatePath, d.dir)
		defer removeWaiter(wg)
		events, gateWake = events && wg.events, wg.wake
	}
	maxDelay := maxBackstop
	if !events {
		maxDelay = maxBackstopBlind
	}
	delay := minBackstop
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
		why := stepHeld
		if yield {
			yield = false // starving waiters first; a wake-up or the backstop brings this one back
		} else {
			var g driver.Grant
			why, g, err = a.step(ctx)
			if err != nil || why == stepTaken {
				return g, err
			}
		}
		wait := delay
		if why == stepPassing {
			wait = passingRetry
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-d.done:
			return driver.Grant{}, driver.ErrClosed
		case <-w.wake:
			delay = minBackstop
		case <-gateWake:
			delay = minBackstop
		case <-timer.C:
			if why != stepPassing {
				delay = min(2*delay, maxDelay)
			}
		}
	}
}

// passingRetry is how soon a writer tries again a gate readers passed.
const passingRetry = 100 * time.Microsecond
