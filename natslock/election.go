package natslock

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
)

// An election is a mutex on the key elect.<name>, whose record carries
// the candidate's value after its first line (see record): a campaign is
// Lock or TryLock, a resignation Unlock.

// Leader reads the election's key from the bucket stream's leader (see
// get): the leader's value and token, or the zero LeaderInfo when the key
// holds no lock.
func (d *Driver) Leader(ctx context.Context, name string) (driver.LeaderInfo, error) {
	if d.closed.Load() {
		return driver.LeaderInfo{}, driver.ErrClosed
	}
	e, err := d.get(ctx, keyBase(driver.Leader, name))
	if err != nil {
		return driver.LeaderInfo{}, fmt.Errorf("natslock: leader of %q: %w", name, err)
	}
	return leaderOf(e), nil
}

// leaderOf is the leader a key's last message names.
func leaderOf(e entry) driver.LeaderInfo {
	if !e.held {
		return driver.LeaderInfo{}
	}
	return driver.LeaderInfo{Value: e.rec.value, Token: e.token()}
}

// Observe sends the election's leader on the returned channel: the current
// one once the watch of its key has delivered the key's last message, then
// each change of value or token (renewals are not sent); the key is read
// again at the leader's expiry in case the server's marker was missed (see
// docs/NATS.md). The channel holds one value: a reader that falls behind
// gets the latest. It is closed when ctx ends or the driver closes.
func (d *Driver) Observe(ctx context.Context, name string) (<-chan driver.LeaderInfo, error) {
	if d.closed.Load() {
		return nil, driver.ErrClosed
	}
	key := keyBase(driver.Leader, name)
	o := &observer{d: d, key: key, out: make(chan driver.LeaderInfo, 1)}
	watcher, err := d.watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("natslock: observe %q: %w", name, err)
	}
	d.bg.Go(func() {
		defer close(o.out)
		o.run(ctx, watcher)
	})
	return o.out, nil
}

// observer is one Observe call's goroutine.
type observer struct {
	d   *Driver
	key string
	out chan driver.LeaderInfo
	due time.Time // the leader's expiry, as seen; zero when nobody leads
	// last is the value last put on out (sent says there is one); prev
	// the one before (hasPrev), which is what the reader has while last
	// waits on the channel unread.
	last, prev    driver.LeaderInfo
	sent, hasPrev bool
}

// run follows the watch until ctx ends or the driver closes, watching
// again when the watch's subscription ends.
func (o *observer) run(ctx context.Context, watcher *kvWatch) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() { stopWatch(watcher) }()
	var pending entry // the key's last message (none: zero), until the watch's initial values are all in
	init := false
	pause := time.Duration(0)
	for {
		var updates <-chan jetstream.KeyValueEntry
		next := time.Hour
		if watcher != nil {
			updates = watcher.Updates()
		} else {
			next = pause
		}
		if !o.due.IsZero() {
			next = min(next, max(time.Until(o.due), 0))
		}
		timer.Reset(next)
		select {
		case kve, ok := <-updates:
			switch {
			case !ok:
				stopWatch(watcher)
				watcher, init, pending = nil, false, entry{}
				pause = 20 * time.Millisecond
			case kve == nil:
				if !init {
					init = true
					o.seen(pending)
				}
			default:
				e := fromKV(kve)
				if init {
					o.seen(e)
				} else {
					pending = e
				}
			}
		case <-timer.C:
			if watcher == nil {
				var err error
				if watcher, err = o.d.watch(ctx, o.key); err != nil {
					pause = min(2*pause, retryPause)
				}
				continue
			}
			if e, err := o.d.get(ctx, o.key); err == nil {
				o.seen(e)
			} else {
				o.due = time.Now().Add(minBackstop)
			}
		case <-ctx.Done():
			return
		case <-o.d.done:
			return
		}
	}
}

// seen takes in the key's last message: it sends the leader it names if
// that is a change, and sets the timer at a leader's expiry.
func (o *observer) seen(e entry) {
	info := leaderOf(e)
	o.due = time.Time{}
	if e.held {
		o.due = time.Now().Add(e.rec.ttl + expirySlack)
	}
	if o.sent && info == o.last {
		return
	}
	select {
	case <-o.out:
		// The reader had not taken last, and still has prev.
	default:
		o.prev, o.hasPrev = o.last, o.sent
	}
	o.sent, o.last = true, info
	if o.hasPrev && info == o.prev {
		return // what the reader has: consecutive values differ
	}
	o.out <- info
}
