package natslock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// resolve refuses a request the driver cannot serve, and resolves the
// others: every call starts here.
func (d *Driver) resolve(r driver.Request) (lockReq, error) {
	switch {
	case d.closed.Load():
		return lockReq{}, driver.ErrClosed
	case !d.Supports(r.Mode):
		return lockReq{}, fmt.Errorf("natslock: %s lock %q: %w (%s)", r.Mode, r.Name, driver.ErrUnsupported, d.UnsupportedReason(r.Mode))
	case r.TTL <= 0:
		return lockReq{}, fmt.Errorf("natslock: lock %q: TTL %v is not positive", r.Name, r.TTL)
	case r.Mode == driver.Permit && r.Limit < 1:
		return lockReq{}, fmt.Errorf("natslock: semaphore %q: limit %d is below 1", r.Name, r.Limit)
	}
	return lockReq{Request: r, ttl: storeTTL(r.TTL)}, nil
}

// Supports reports whether the driver implements mode m: the mutex, the
// semaphore and the election. Readers-writer locks are not (see
// UnsupportedReason).
func (d *Driver) Supports(m driver.Mode) bool {
	switch m {
	case driver.Exclusive, driver.Permit, driver.Leader:
		return true
	}
	return false
}

// UnsupportedReason says why the driver lacks mode m, "" when it has it.
func (d *Driver) UnsupportedReason(m driver.Mode) string {
	if m == driver.Read || m == driver.Write {
		return "a NATS KV bucket changes one key at a time, with no transaction over a writer's key and the readers' keys, " +
			"so it cannot admit a writer and exclude readers atomically"
	}
	return ""
}

// TryLock makes one attempt to take the lock: a write of the lock's key,
// with a per-key TTL of r.TTL rounded up to whole seconds, that the
// server accepts only if the key holds no lock (see docs/NATS.md, How a
// lock works); a semaphore tries its slots in order. A held lock's error
// is a *driver.HeldError with the holder's remaining TTL. After an error
// whose outcome is unknown (a timeout), the key is removed in the
// background if the write went through after all (see abandon).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	q, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	o, err := d.tryAll(ctx, &q, q.keys(), time.Now())
	if err != nil && o.maybe {
		d.abandon(q)
	}
	return o.g, err
}

// outcome is what an attempt learnt besides its error.
type outcome struct {
	g     driver.Grant
	left  time.Duration // the holder's remaining TTL, when the lock is held
	maybe bool          // a write of the attempt may have gone through unseen
}

// tryAll makes TryLock's attempt on each of keys in turn until one is
// taken; start is before the first request.
func (d *Driver) tryAll(ctx context.Context, q *lockReq, keys []string, start time.Time) (outcome, error) {
	b := q.record(0, q.Value)
	var all outcome
	for _, key := range keys {
		o, err := d.take(ctx, q, key, b, start)
		all.maybe = all.maybe || o.maybe
		if err == nil {
			all.g = o.g
			return all, nil
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			return all, err
		}
		if o.left > 0 && (all.left == 0 || o.left < all.left) {
			all.left = o.left
		}
	}
	return all, &driver.HeldError{Name: q.Name, Remaining: all.left}
}

// take tries to take key for q with the record b, as TryLock describes:
// the grant, or an error matching driver.ErrNotAcquired (with the
// holder's remaining TTL in the outcome), or another error.
func (d *Driver) take(ctx context.Context, q *lockReq, key string, b []byte, start time.Time) (outcome, error) {
	mark, _ := d.marks.get(key)
	rev, err := d.put(ctx, key, b, q.ttl, mark)
	if err == nil {
		return outcome{g: d.granted(q, key, rev, 0, start)}, nil
	}
	if !wrongRevision(err) {
		return d.unknown(ctx, q, key, start, err)
	}
	e, err := d.get(ctx, key)
	if err != nil {
		return outcome{}, fmt.Errorf("natslock: lock %q: read %s: %w", q.Name, key, err)
	}
	if e.found && !e.marker {
		if e.ownedBy(q.Owner) {
			// A write of this acquisition whose answer was lost.
			return outcome{g: d.granted(q, key, e.rev, e.token(), start)}, nil
		}
		return outcome{left: e.remaining()}, driver.ErrNotAcquired
	}
	rev, err = d.put(ctx, key, b, q.ttl, e.rev) // e.rev is 0 when the key has no message
	switch {
	case err == nil:
		return outcome{g: d.granted(q, key, rev, 0, start)}, nil
	case wrongRevision(err):
		return outcome{}, driver.ErrNotAcquired // taken just now
	}
	return d.unknown(ctx, q, key, start, err)
}

// unknown handles a write of q on key that failed with cause: refused, it
// wrote nothing; otherwise one read tells whether it went through.
func (d *Driver) unknown(ctx context.Context, q *lockReq, key string, start time.Time, cause error) (outcome, error) {
	err := fmt.Errorf("natslock: lock %q: write %s: %w", q.Name, key, cause)
	if refused(cause) {
		return outcome{}, err
	}
	if ctx.Err() != nil {
		return outcome{maybe: true}, err
	}
	if e, gerr := d.get(ctx, key); gerr == nil && e.ownedBy(q.Owner) {
		return outcome{g: d.granted(q, key, e.rev, e.token(), start)}, nil
	}
	return outcome{maybe: true}, err
}

// remaining is how long the lock in e has left, by the server's time of
// its last write and its TTL; 0 when unknown.
func (e entry) remaining() time.Duration {
	if !e.held {
		return 0
	}
	return max(time.Until(e.time.Add(e.rec.ttl)), 0)
}

// granted records the lock q took on key at revision rev (token 0: rev
// is the token) and returns its grant, valid for q.TTL from start, before
// the request was sent: the server counts the key's TTL, q.TTL rounded
// up, from when it stored the write.
func (d *Driver) granted(q *lockReq, key string, rev, token uint64, start time.Time) driver.Grant {
	if token == 0 {
		token = rev
	}
	d.holds.set(q.Owner, hold{key: key, rev: rev, token: token, value: q.Value})
	d.marks.drop(key)
	return driver.Grant{Token: token, Expires: start.Add(q.TTL)}
}

// Renew extends the lock to r.TTL, measured from before the write was
// sent: a write of the key with a new per-key TTL that the server accepts
// only if the key's last revision is the holder's last write. Another
// revision holding r.Owner's record (a renewal whose answer was lost) is
// renewed in turn; any other, or none, means the lock is gone: the error
// wraps driver.ErrNotHeld.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	q, h, err := d.holdOf(ctx, r)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	b := q.record(h.token, h.value)
	rev, err := d.rewrite(ctx, &q, &h, "renew", func(expect uint64) (uint64, error) {
		return d.put(ctx, h.key, b, q.ttl, expect)
	})
	if err != nil {
		return time.Time{}, err
	}
	h.rev = rev
	d.holds.set(q.Owner, h)
	return start.Add(q.TTL), nil
}

// Unlock releases the lock: a purge marker on its key, which the server
// accepts only if the key's last revision is the holder's, which wakes
// the waiters and expires after the marker TTL. The error wraps
// driver.ErrNotHeld when r.Owner did not hold the lock.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	q, h, err := d.holdOf(ctx, r)
	if err != nil {
		return err
	}
	rev, err := d.rewrite(ctx, &q, &h, "unlock", func(expect uint64) (uint64, error) {
		return d.purge(ctx, h.key, expect)
	})
	if err != nil {
		return err
	}
	d.marks.set(h.key, rev)
	d.holds.drop(q.Owner)
	return nil
}

// rewrite makes write, Renew's or Unlock's write of h's key on the
// condition that its last revision is expect, and returns the new
// revision. Another revision holding q.Owner's record is a renewal whose
// answer was lost, and is written over in turn; anything else means the
// lock is gone: the error wraps driver.ErrNotHeld.
func (d *Driver) rewrite(ctx context.Context, q *lockReq, h *hold, op string, write func(expect uint64) (uint64, error)) (uint64, error) {
	for range 2 {
		rev, err := write(h.rev)
		if err == nil {
			return rev, nil
		}
		if !wrongRevision(err) {
			return 0, fmt.Errorf("natslock: %s %q: %w", op, q.Name, err)
		}
		e, err := d.get(ctx, h.key)
		if err != nil {
			return 0, fmt.Errorf("natslock: %s %q: read %s: %w", op, q.Name, h.key, err)
		}
		if !e.ownedBy(q.Owner) {
			d.holds.drop(q.Owner)
			if e.marker {
				d.marks.set(h.key, e.rev)
			}
			return 0, fmt.Errorf("natslock: %s %q: %w", op, q.Name, driver.ErrNotHeld)
		}
		h.rev = e.rev
	}
	d.holds.drop(q.Owner)
	return 0, fmt.Errorf("natslock: %s %q: %w (its key keeps changing)", op, q.Name, driver.ErrNotHeld)
}

// Resume checks that r.Owner holds r.Name in r.Mode, by reading the
// lock's keys, and renews it as Renew does. It changes nothing when
// r.Owner does not hold it.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRenew(ctx, d, r)
}

// holdOf resolves r and returns what the driver knows of its lock, read
// from the lock's keys when it knows nothing (a lock resumed from another
// process).
func (d *Driver) holdOf(ctx context.Context, r driver.Request) (lockReq, hold, error) {
	q, err := d.resolve(r)
	if err != nil {
		return q, hold{}, err
	}
	if h, ok := d.holds.get(q.Owner); ok {
		return q, h, nil
	}
	for _, key := range q.keys() {
		e, err := d.get(ctx, key)
		if err != nil {
			return q, hold{}, fmt.Errorf("natslock: lock %q: read %s: %w", q.Name, key, err)
		}
		if e.ownedBy(q.Owner) {
			h := hold{key: key, rev: e.rev, token: e.token(), value: e.rec.value}
			d.holds.set(q.Owner, h)
			return q, h, nil
		}
	}
	return q, hold{}, fmt.Errorf("natslock: lock %q: %w", q.Name, driver.ErrNotHeld)
}

// abandon purges, in the background, a key of q's that holds q.Owner's
// record unseen (a write that timed out but went through), reading q's
// keys again with a growing pause until such a key would have expired.
// Close waits for it.
func (d *Driver) abandon(q lockReq) {
	if d.closed.Load() {
		return
	}
	d.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), q.ttl+d.reqTimeout)
		defer cancel()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
			for _, key := range q.keys() {
				e, err := d.get(ctx, key)
				if err == nil && e.ownedBy(q.Owner) {
					if _, err := d.purge(ctx, key, e.rev); err == nil || wrongRevision(err) {
						return
					}
				}
			}
			// A write can land after a read that missed it (one proposed
			// to a stream leader that then lost its leadership).
			select {
			case <-d.done:
				return
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	})
}

// hold is what the driver remembers of a lock it holds: its key, the
// revision of its last write (the condition of the next), its token and,
// for an election, the candidate's value, which a lock resumed from a
// handle, which lacks it, must keep writing.
type hold struct {
	key   string
	rev   uint64
	token uint64
	value string
}

// A table is a map guarded by a mutex, of at most max entries (0: no
// bound); it is emptied when full.
type table[V any] struct {
	mu  sync.Mutex
	m   map[string]V
	max int
}

func (t *table[V]) get(k string) (V, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[k]
	return v, ok
}

func (t *table[V]) set(k string, v V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || t.max > 0 && len(t.m) >= t.max {
		t.m = make(map[string]V)
	}
	t.m[k] = v
}

func (t *table[V]) drop(k string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, k)
}

// holds maps the owner of each lock the driver holds to its hold. An
// owner is unique to an acquisition, so it identifies the lock.
type holds = table[hold]

// maxMarks bounds the marks table.
const maxMarks = 4096

// marks remembers the revision of the last marker the driver saw or wrote
// on a key, so that the next acquisition of the key, which must name that
// revision, takes one round trip. A stale entry costs a read and a second
// try, never safety: the server checks the revision.
type marks = table[uint64]
