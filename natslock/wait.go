package natslock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/gate"
)

// expirySlack is how long past a holder's TTL, counted from when it saw
// the holder's last write, a waiter tries again without an event: the
// server removes an expired key on its own timer, and its marker should
// come first.
const expirySlack = 100 * time.Millisecond

// minBackstop is the shortest wait before a waiter looks again at a key
// that was still held past its backstop.
const minBackstop = 250 * time.Millisecond

// retryPause bounds the pause between a waiter's attempts after an error
// (a stream leader's election, a lost connection).
const retryPause = time.Second

// slot is what a waiter knows of one of the keys it may take.
type slot struct {
	key  string
	free bool      // the key holds no lock: no message, or a marker
	rev  uint64    // the marker's revision when free (0: no message)
	due  time.Time // when held: the backstop, when to try without an event
}

// gates let one waiting Lock per lock of a driver wait on the server at a
// time (see internal/gate and docs/NATS.md, Waiting): otherwise each
// waiter holds a KV watch, a consumer on the server, and answers every
// release with a write, so a handoff costs more the more waiters there
// are (docs/SCALING.md).
type gates = gate.Set[*handover]

// waitGate is one lock's queue of waiters.
type waitGate = gate.Gate[*handover]

// A handover is a watch one waiter leaves to the next, with what it had
// learnt of the keys.
type handover struct {
	w     *kvWatch
	slots []slot
	init  bool
}

// discardHandover stops the watch no waiter is left to take.
func discardHandover(h *handover) {
	if h != nil {
		stopWatch(h.w)
	}
}

// takeHandover returns the watch the last waiter left in g, if it watches
// keys.
func takeHandover(g *waitGate, keys []string) *handover {
	h := g.Take()
	if h != nil && !slices.EqualFunc(h.slots, keys, func(s slot, k string) bool { return s.key == k }) {
		stopWatch(h.w)
		return nil
	}
	return h
}

// handOver is what a waiter granted the lock leaves to the next: its
// watch, and its keys as held until the watch says otherwise (its own
// write is on the way), the backstop at ttl.
func handOver(w *kvWatch, slots []slot, init bool, ttl time.Duration) *handover {
	due := time.Now().Add(ttl + expirySlack)
	for i := range slots {
		slots[i].free, slots[i].due = false, due
	}
	return &handover{w: w, slots: slots, init: init}
}

// Lock takes the lock, waiting as long as ctx allows: TryLock's attempt,
// then a KV watch of the lock's keys, trying again when a key reports a
// marker or a holder's expiry passes; one waiter per lock and driver waits
// so, the others queued behind it (see docs/NATS.md, Waiting). When ctx
// ends first, Lock returns its error joined with the last error met, and,
// if a write's outcome was unknown, removes in the background a key that
// write may have taken.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	q, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	ks := q.keys()
	o, err := d.tryAll(ctx, &q, ks, time.Now())
	if err == nil {
		return o.g, nil
	}
	w := &wait{d: d, q: q, b: q.record(0, q.Value), maybe: o.maybe}
	if fatal(err) {
		return w.abandon(err)
	}
	// A lock's gate is named by its first key: each mode's keys are apart.
	gate, gerr := d.gates.Enter(ctx, ks[0], d.done)
	if gerr != nil {
		if !errors.Is(gerr, driver.ErrClosed) {
			gerr = fmt.Errorf("natslock: lock %q: %w", q.Name, gerr)
		}
		return w.abandon(gerr)
	}
	if !errors.Is(err, driver.ErrNotAcquired) {
		w.failed(err)
	}
	g, err := w.run(ctx, ks, gate)
	if err != nil {
		return w.abandon(err)
	}
	return g, nil
}

// fatal reports whether an attempt's error ends a waiting Lock: the
// driver closed, or the server refused the request for good (a
// permission, a bucket without per-key TTL).
func fatal(err error) bool {
	if errors.Is(err, driver.ErrClosed) || errors.Is(err, nats.ErrPermissionViolation) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrAuthorization) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && !wrongRevision(err)
}

// wait is one waiting Lock call.
type wait struct {
	d     *Driver
	q     lockReq
	b     []byte // the record the acquisition writes
	slots []slot
	// init says the watch has delivered every key's last message.
	init bool
	// maybe says that a write's outcome was unknown: the next attempt
	// reads the key first, and an abandoned wait removes what it wrote.
	maybe bool
	last  error // the last error met, for the caller when ctx ends
	pause time.Duration
}

// abandon ends a Lock that failed with err, removing in the background
// a key it may have taken unseen.
func (w *wait) abandon(err error) (driver.Grant, error) {
	if w.maybe {
		w.d.abandon(w.q)
	}
	return driver.Grant{}, err
}

// run waits for one of ks, the waiter in gate's slot; it leaves the gate,
// and its watch to the next waiter when it got the lock.
func (w *wait) run(ctx context.Context, ks []string, gate *waitGate) (g driver.Grant, err error) {
	var watcher *kvWatch
	if h := takeHandover(gate, ks); h != nil {
		watcher, w.slots, w.init = h.w, h.slots, h.init
	} else {
		w.slots = make([]slot, len(ks))
		for i, k := range ks {
			w.slots[i] = slot{key: k}
		}
	}
	defer func() {
		if err == nil && watcher != nil {
			gate.Leave(handOver(watcher, w.slots, w.init, w.q.ttl))
			return
		}
		stopWatch(watcher)
		gate.Leave(nil)
	}()
	filter := w.q.filter(ks)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var watchAt time.Time // when to watch again, after a failure
	for {
		if watcher == nil && !time.Now().Before(watchAt) {
			var err error
			if watcher, err = w.d.watch(ctx, filter); err != nil {
				err = fmt.Errorf("natslock: lock %q: watch %s: %w", w.q.Name, filter, err)
				w.failed(err)
				if fatal(err) {
					return driver.Grant{}, err
				}
				watchAt = time.Now().Add(w.pause)
			} else {
				w.rewatched()
			}
		}
		var updates <-chan jetstream.KeyValueEntry
		next := w.nextDue()
		if watcher != nil {
			updates = watcher.Updates()
		} else {
			next = min(next, time.Until(watchAt))
		}
		timer.Reset(max(next, 0))
		select {
		case e, ok := <-updates:
			if !ok {
				// The subscription ended (its connection closed): watch
				// again, or end with the driver.
				stopWatch(watcher)
				watcher = nil
				if w.d.closed.Load() {
					return driver.Grant{}, driver.ErrClosed
				}
				continue
			}
			if g, ok := w.event(ctx, e); ok {
				return g, nil
			}
		case <-timer.C:
			if g, ok := w.due(ctx); ok {
				return g, nil
			}
		case <-ctx.Done():
			return driver.Grant{}, w.ended(ctx)
		case <-w.d.done:
			return driver.Grant{}, driver.ErrClosed
		}
		if w.last != nil && fatal(w.last) {
			return driver.Grant{}, w.last
		}
	}
}

// rewatched forgets what an earlier watch said: a new one reports every
// key's last message again.
func (w *wait) rewatched() {
	w.init = false
	for i := range w.slots {
		w.slots[i].free, w.slots[i].due = false, time.Time{}
	}
}

// A kvWatch is a KV watch that lives until Stop.
type kvWatch struct {
	jetstream.KeyWatcher
	cancel context.CancelFunc
}

// watch starts a KV watch of filter, bounded by the request timeout, which
// lives until it is stopped or ctx ends (nats.go ends a watch's
// subscription with the context it was made with).
func (d *Driver) watch(ctx context.Context, filter string) (*kvWatch, error) {
	wctx, cancel := context.WithCancel(ctx)
	t := time.AfterFunc(d.reqTimeout, cancel)
	watcher, err := d.kv.Watch(wctx, filter)
	if !t.Stop() && err == nil {
		// The timeout cut the watch off as it was made.
		err = context.DeadlineExceeded
		stopWatch(&kvWatch{watcher, cancel})
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &kvWatch{watcher, cancel}, nil
}

// stopWatch ends a watch, and reads its channel until it closes: nats.go's
// subscription goroutine blocks on it when it is full.
func stopWatch(w *kvWatch) {
	if w == nil {
		return
	}
	_ = w.Stop()
	w.cancel()
	go func(ch <-chan jetstream.KeyValueEntry) {
		for range ch {
		}
	}(w.Updates())
}

// event takes in what the watch reported: nil once every key's last
// message was delivered, else a key's new last message. It tries the keys
// it learns are free, and reports a grant.
func (w *wait) event(ctx context.Context, e jetstream.KeyValueEntry) (driver.Grant, bool) {
	if e == nil {
		if w.init {
			return driver.Grant{}, false
		}
		// Keys the watch did not report hold no message.
		w.init = true
		for i := range w.slots {
			s := &w.slots[i]
			if s.due.IsZero() && !s.free {
				s.free, s.rev = true, 0
			}
		}
		return w.tryFree(ctx)
	}
	// -1: a permit slot beyond this caller's limit.
	i := slices.IndexFunc(w.slots, func(s slot) bool { return s.key == e.Key() })
	if i < 0 {
		return driver.Grant{}, false
	}
	s := &w.slots[i]
	en := fromKV(e)
	if en.marker {
		s.free, s.rev, s.due = true, en.rev, time.Time{}
		w.d.marks.set(s.key, en.rev)
		if w.init {
			return w.tryFree(ctx)
		}
		return driver.Grant{}, false
	}
	ttl := w.q.ttl
	if en.held {
		ttl = en.rec.ttl
	}
	s.free, s.rev, s.due = false, en.rev, time.Now().Add(ttl+expirySlack)
	return driver.Grant{}, false
}

// tryFree tries each key known to be free, in order.
func (w *wait) tryFree(ctx context.Context) (driver.Grant, bool) {
	for i := range w.slots {
		if s := &w.slots[i]; s.free {
			if g, ok := w.try(ctx, s); ok {
				return g, true
			}
		}
	}
	return driver.Grant{}, false
}

// due tries each key whose backstop has come, and every key after an
// error.
func (w *wait) due(ctx context.Context) (driver.Grant, bool) {
	now := time.Now()
	for i := range w.slots {
		s := &w.slots[i]
		if w.pause > 0 || s.free || !s.due.IsZero() && !now.Before(s.due) {
			s.free = false // read it: what the slot holds is unknown
			if g, ok := w.try(ctx, s); ok {
				return g, true
			}
		}
	}
	return driver.Grant{}, false
}

// try makes one attempt at slot s: a write naming the marker's revision
// when the watch saw the key free and nothing went wrong before,
// otherwise TryLock's attempt, which reads the key when it must.
func (w *wait) try(ctx context.Context, s *slot) (driver.Grant, bool) {
	start := time.Now()
	if s.free && !w.maybe && w.pause == 0 {
		rev, err := w.d.put(ctx, s.key, w.b, w.q.ttl, s.rev)
		switch {
		case err == nil:
			return w.d.granted(&w.q, s.key, rev, 0, start), true
		case wrongRevision(err):
			// Another waiter took it: its write is on the way.
			s.free, s.due = false, start.Add(w.q.ttl+expirySlack)
			return driver.Grant{}, false
		}
		o, err := w.d.unknown(ctx, &w.q, s.key, start, err)
		if err == nil {
			return o.g, true
		}
		w.maybe = w.maybe || o.maybe
		w.failed(err)
		return driver.Grant{}, false
	}
	o, err := w.d.take(ctx, &w.q, s.key, w.b, start)
	w.maybe = w.maybe || o.maybe
	switch {
	case err == nil:
		w.pause = 0
		return o.g, true
	case errors.Is(err, driver.ErrNotAcquired):
		w.pause = 0
		s.free = false
		if s.due.IsZero() || !start.Before(s.due) {
			// Still held past the backstop: the holder renewed (the watch
			// will bring its write) or the server is late removing it.
			s.due = start.Add(max(o.left+expirySlack, minBackstop))
		}
	default:
		w.failed(err)
	}
	return driver.Grant{}, false
}

// failed notes an error; the next attempt comes after a growing pause.
func (w *wait) failed(err error) {
	w.last = err
	w.pause = min(max(2*w.pause, 20*time.Millisecond), retryPause)
}

// nextDue is how long until the next attempt without an event.
func (w *wait) nextDue() time.Duration {
	if w.pause > 0 {
		return w.pause
	}
	next := time.Hour
	now := time.Now()
	for _, s := range w.slots {
		if !s.due.IsZero() {
			next = min(next, max(s.due.Sub(now), 0))
		}
	}
	return next
}

// ended is the error of a wait whose ctx ended.
func (w *wait) ended(ctx context.Context) error {
	err := fmt.Errorf("natslock: lock %q: %w", w.q.Name, ctx.Err())
	if w.last != nil && !errors.Is(w.last, driver.ErrNotAcquired) {
		return errors.Join(err, w.last)
	}
	return err
}
