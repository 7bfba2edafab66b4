package natslock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// keys returns the keys r may take: the mutex's or the election's one
// key, or the Limit permit slots of a semaphore.
func keys(r driver.Request) []string {
	switch r.Mode {
	case driver.Leader:
		return []string{electionKey(r.Name)}
	case driver.Permit:
		base := semaphoreBase(r.Name)
		k := make([]string, r.Limit)
		for i := range k {
			k[i] = slotKey(base, i)
		}
		return k
	}
	return []string{mutexKey(r.Name)}
}

// data returns the record r writes, with token (0 in the acquiring
// write, whose revision is the token).
func data(r driver.Request, token uint64) []byte {
	rec := record{owner: r.Owner, token: token, ttl: storeTTL(r.TTL), value: r.Value, election: r.Mode == driver.Leader}
	return appendRecord(make([]byte, 0, 64+len(r.Value)), rec)
}

// check refuses a request the driver cannot serve.
func (d *Driver) check(r driver.Request) error {
	if d.closed.Load() {
		return driver.ErrClosed
	}
	if !d.Supports(r.Mode) {
		return fmt.Errorf("natslock: %s lock %q: %w (%s)", r.Mode, r.Name, driver.ErrUnsupported, d.UnsupportedReason(r.Mode))
	}
	if r.TTL <= 0 {
		return fmt.Errorf("natslock: lock %q: TTL %v is not positive", r.Name, r.TTL)
	}
	if r.Mode == driver.Permit && r.Limit < 1 {
		return fmt.Errorf("natslock: semaphore %q: limit %d is below 1", r.Name, r.Limit)
	}
	return nil
}

// TryLock makes one attempt to take the lock: a write of the lock's key
// that the server accepts only if the key holds no lock (no message, or a
// marker whose revision the driver knows), with a per-key TTL of r.TTL
// rounded up to whole seconds. That is one round trip when the key is
// free and its marker known (the driver's own release, or a watch saw
// it); otherwise the driver reads the key and, if it is free, writes
// again naming its marker. A semaphore tries its slots in order. When the
// lock is held the error is a *driver.HeldError with the holder's
// remaining TTL. On an error whose outcome is unknown (a timeout) TryLock
// returns the error and removes the key in the background if its write
// went through after all (see abandon).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := d.check(r); err != nil {
		return driver.Grant{}, err
	}
	o, err := d.tryAll(ctx, r, keys(r), time.Now())
	if err != nil && o.maybe {
		d.abandon(r)
	}
	return o.g, err
}

// outcome is what an attempt learnt besides its error.
type outcome struct {
	g     driver.Grant
	left  time.Duration // the holder's remaining TTL, when the lock is held
	maybe bool          // a write of the attempt may have gone through unseen
}

// tryAll makes one attempt on each of keys in turn until one is taken,
// as TryLock describes; start is before the first request.
func (d *Driver) tryAll(ctx context.Context, r driver.Request, keys []string, start time.Time) (outcome, error) {
	b := data(r, 0)
	var all outcome
	for _, key := range keys {
		o, err := d.take(ctx, r, key, b, start)
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
	return all, &driver.HeldError{Name: r.Name, Remaining: all.left}
}

// take tries to take key for r with the record b, as TryLock describes:
// the grant, or an error matching driver.ErrNotAcquired (with the
// holder's remaining TTL in the outcome), or another error.
func (d *Driver) take(ctx context.Context, r driver.Request, key string, b []byte, start time.Time) (outcome, error) {
	ttl := storeTTL(r.TTL)
	rev, err := d.put(ctx, key, b, ttl, d.marks.get(key))
	if err == nil {
		return outcome{g: d.granted(r, key, rev, 0, start)}, nil
	}
	if !wrongRevision(err) {
		return d.unknown(ctx, r, key, start, err)
	}
	e, err := d.get(ctx, key)
	if err != nil {
		return outcome{}, fmt.Errorf("natslock: lock %q: read %s: %w", r.Name, key, err)
	}
	if e.found && !e.marker {
		if e.held && e.rec.owner == r.Owner {
			// A write of this acquisition whose answer was lost.
			return outcome{g: d.granted(r, key, e.rev, e.rec.tokenAt(e.rev), start)}, nil
		}
		return outcome{left: e.remaining()}, driver.ErrNotAcquired
	}
	rev, err = d.put(ctx, key, b, ttl, e.rev) // e.rev is 0 when the key has no message
	switch {
	case err == nil:
		return outcome{g: d.granted(r, key, rev, 0, start)}, nil
	case wrongRevision(err):
		return outcome{}, driver.ErrNotAcquired // taken just now
	}
	return d.unknown(ctx, r, key, start, err)
}

// unknown handles a write of r on key that failed with cause: refused, it
// wrote nothing; otherwise one read tells whether it went through.
func (d *Driver) unknown(ctx context.Context, r driver.Request, key string, start time.Time, cause error) (outcome, error) {
	err := fmt.Errorf("natslock: lock %q: write %s: %w", r.Name, key, cause)
	if refused(cause) {
		return outcome{}, err
	}
	if ctx.Err() != nil {
		return outcome{maybe: true}, err
	}
	e, gerr := d.get(ctx, key)
	if gerr == nil && e.held && e.rec.owner == r.Owner {
		return outcome{g: d.granted(r, key, e.rev, e.rec.tokenAt(e.rev), start)}, nil
	}
	return outcome{maybe: true}, err
}

// remaining is how long the lock in e has left, by the server's
// timestamp of its last write and the TTL it was written with; 0 when
// unknown.
func (e entry) remaining() time.Duration {
	if !e.held {
		return 0
	}
	return max(time.Until(e.time.Add(e.rec.ttl)), 0)
}

// granted records the lock r took on key at revision rev (token 0: rev
// is the token) and returns its grant, valid from start, before the
// request that took it was sent, for r.TTL: the server counts the key's
// TTL, which is r.TTL rounded up, from when it stored the write.
func (d *Driver) granted(r driver.Request, key string, rev, token uint64, start time.Time) driver.Grant {
	if token == 0 {
		token = rev
	}
	d.holds.set(r.Owner, hold{key: key, rev: rev, token: token, value: r.Value})
	d.marks.drop(key)
	return driver.Grant{Token: token, Expires: start.Add(r.TTL)}
}

// Refresh extends the lock to r.TTL: a write of the key with a new
// per-key TTL that the server accepts only if the key's last revision is
// the holder's last write. Another revision that holds r.Owner's record
// is a renewal whose answer was lost, and is renewed in turn; any other
// revision, or none, means the lock is gone: the error wraps
// driver.ErrNotHeld. The expiry returned is measured from before the
// write was sent.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	if err := d.check(r); err != nil {
		return time.Time{}, err
	}
	h, err := d.holdOf(ctx, r)
	if err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	r.Value = h.value
	b := data(r, h.token)
	ttl := storeTTL(r.TTL)
	for range 2 {
		rev, err := d.put(ctx, h.key, b, ttl, h.rev)
		if err == nil {
			h.rev = rev
			d.holds.set(r.Owner, h)
			return start.Add(r.TTL), nil
		}
		if !wrongRevision(err) {
			return time.Time{}, fmt.Errorf("natslock: refresh %q: %w", r.Name, err)
		}
		e, err := d.get(ctx, h.key)
		if err != nil {
			return time.Time{}, fmt.Errorf("natslock: refresh %q: read %s: %w", r.Name, h.key, err)
		}
		if !e.held || e.rec.owner != r.Owner {
			d.holds.drop(r.Owner)
			return time.Time{}, fmt.Errorf("natslock: refresh %q: %w", r.Name, driver.ErrNotHeld)
		}
		h.rev = e.rev
	}
	d.holds.drop(r.Owner)
	return time.Time{}, fmt.Errorf("natslock: refresh %q: %w (its key keeps changing)", r.Name, driver.ErrNotHeld)
}

// Unlock releases the lock: a purge marker on its key, which the server
// accepts only if the key's last revision is the holder's. The marker
// wakes the waiters and expires after the marker TTL. It returns an
// error wrapping driver.ErrNotHeld when r.Owner did not hold the lock.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	if err := d.check(r); err != nil {
		return err
	}
	h, err := d.holdOf(ctx, r)
	if err != nil {
		return err
	}
	for range 2 {
		rev, err := d.purge(ctx, h.key, h.rev)
		if err == nil {
			d.marks.set(h.key, rev)
			d.holds.drop(r.Owner)
			return nil
		}
		if !wrongRevision(err) {
			return fmt.Errorf("natslock: unlock %q: %w", r.Name, err)
		}
		e, err := d.get(ctx, h.key)
		if err != nil {
			return fmt.Errorf("natslock: unlock %q: read %s: %w", r.Name, h.key, err)
		}
		if !e.held || e.rec.owner != r.Owner {
			d.holds.drop(r.Owner)
			if e.marker {
				d.marks.set(h.key, e.rev)
			}
			return fmt.Errorf("natslock: unlock %q: %w", r.Name, driver.ErrNotHeld)
		}
		h.rev = e.rev // a renewal whose answer was lost
	}
	return fmt.Errorf("natslock: unlock %q: %w (its key keeps changing)", r.Name, driver.ErrNotHeld)
}

// Resume checks that r.Owner holds r.Name in r.Mode, by reading the
// lock's keys, and renews it as Refresh does. It changes nothing when
// r.Owner does not hold it.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRefresh(ctx, d, r)
}

// holdOf returns what the driver knows of r's lock, reading the lock's
// keys for r.Owner's record when it knows nothing (a lock resumed from
// another process).
func (d *Driver) holdOf(ctx context.Context, r driver.Request) (hold, error) {
	if h, ok := d.holds.get(r.Owner); ok {
		return h, nil
	}
	for _, key := range keys(r) {
		e, err := d.get(ctx, key)
		if err != nil {
			return hold{}, fmt.Errorf("natslock: lock %q: read %s: %w", r.Name, key, err)
		}
		if e.held && e.rec.owner == r.Owner {
			h := hold{key: key, rev: e.rev, token: e.rec.tokenAt(e.rev), value: e.rec.value}
			d.holds.set(r.Owner, h)
			return h, nil
		}
	}
	return hold{}, fmt.Errorf("natslock: lock %q: %w", r.Name, driver.ErrNotHeld)
}

// abandon removes, in the background, a key r may have written without
// learning of it (a write that timed out but went through): it reads r's
// keys and purges the one holding r.Owner's record, trying again with a
// growing pause until the key, had it been written, would have expired.
// Close waits for it.
func (d *Driver) abandon(r driver.Request) {
	if d.closed.Load() {
		return
	}
	d.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), storeTTL(r.TTL)+d.reqTimeout)
		defer cancel()
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
			for _, key := range keys(r) {
				e, err := d.get(ctx, key)
				if err == nil && e.held && e.rec.owner == r.Owner {
					if _, err := d.purge(ctx, key, e.rev); err == nil || wrongRevision(err) {
						return
					}
				}
			}
			// A write can land after a read that missed it (one proposed
			// to a stream leader that then lost its leadership), so look
			// again until it would have expired.
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
