package pglock

import (
	"context"
	"slices"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A keyState is what the driver knows of one advisory key locally: the
// locks it holds on it and the acquisitions under way, so that it never
// asks a session for a key that this driver already holds, answers a try
// at once when the key is taken here, and lets one Lock at a time wait on
// the server for it while the others wait in the process.
type keyState struct {
	n      int  // holds and acquisitions under way
	shared bool // all n are readers
	// writer is set while a Lock that conflicts with readers waits for
	// the key: a reader's try then fails here, as on the server behind a
	// waiting writer.
	writer bool
	// gate is held by the one Lock of the key that may wait; the others
	// wait to fill it.
	gate chan struct{}
	// changed, when not nil, is closed when n next drops.
	changed chan struct{}
	refs    int // Locks using gate
}

// conflicts reports whether a lock of mode m must wait for what the
// driver holds or asks for on the key.
func (k *keyState) conflicts(m driver.Mode) bool {
	if m == driver.Read {
		return k.writer || (k.n > 0 && !k.shared)
	}
	return k.n > 0
}

// reserveKeyLocked counts an acquisition of mode m of key under way, or
// returns false when it conflicts with what the driver has; Driver.mu is
// held.
func (d *Driver) reserveKeyLocked(key int64, m driver.Mode) bool {
	k := d.keyLocked(key)
	if k.conflicts(m) {
		return false
	}
	if k.n == 0 {
		k.shared = true
	}
	k.n++
	k.shared = k.shared && m == driver.Read
	return true
}

// dropKeyLocked undoes one reserveKeyLocked (a hold ended, or an
// acquisition failed), and wakes the Lock waiting for the key.
func (d *Driver) dropKeyLocked(key int64) {
	k := d.keys[key]
	if k == nil {
		return
	}
	k.n--
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
	d.tidyKeyLocked(key, k)
}

// keyLocked returns the state of key, made if needed; Driver.mu is held.
func (d *Driver) keyLocked(key int64) *keyState {
	k := d.keys[key]
	if k == nil {
		k, d.spareKey = d.spareKey, nil
		if k == nil {
			k = &keyState{}
		}
		d.keys[key] = k
	}
	return k
}

// tidyKeyLocked forgets k, the state of key, once nothing uses it, and
// keeps it as the spare (see Driver.spareKey); Driver.mu is held.
func (d *Driver) tidyKeyLocked(key int64, k *keyState) {
	if k.n != 0 || k.refs != 0 || k.writer {
		return
	}
	delete(d.keys, key)
	if d.spareKey == nil && k.changed == nil {
		k.shared = false
		d.spareKey = k // its gate, if any, is empty: no Lock uses it
	}
}

// endHoldLocked forgets h, which has ended; Driver.mu is held.
func (d *Driver) endHoldLocked(h *hold) {
	if h.ended {
		return
	}
	h.ended = true
	if d.held[h.owner] == h {
		delete(d.held, h.owner)
	}
	d.dropKeyLocked(h.key)
}

// dropSessionLocked takes s out of the sessions acquisitions pick from;
// Driver.mu is held.
func (d *Driver) dropSessionLocked(s *session) {
	if s.gone {
		return
	}
	s.gone = true
	if i := slices.Index(d.sessions, s); i >= 0 {
		d.sessions = slices.Delete(d.sessions, i, i+1)
	}
}

// busySessions is how many sessions the driver opens, before it makes
// acquisitions wait for one another's statements, when every session
// with room is running a statement: concurrent acquisitions then run side
// by side on as many connections.
const busySessions = 16

// session returns a session for a statement asking for keys, with its
// use taken and a place reserved in it (give it back with unreserve, or
// make it a hold): one that holds none of the keys and has room, for
// locks of the keep-alive period, else a new one on an idle or new
// connection. reused reports whether the connection was used before.
func (d *Driver) session(ctx context.Context, keys []int64, period time.Duration) (s *session, reused bool, err error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, false, errClosed
		}
		s = d.pickLocked(keys, period)
		if s != nil {
			for _, k := range keys {
				s.keys[k]++
			}
			s.n++
			s.busy++
		}
		d.mu.Unlock()
		if s == nil {
			break
		}
		switch err := s.take(ctx); {
		case err == nil:
			return s, true, nil
		case ctx.Err() != nil:
			s.dropReservation(keys)
			return nil, false, ctx.Err()
		}
		// The session ended meanwhile: pick again.
		s.dropReservation(keys)
	}
	c, reused, err := d.get(ctx)
	if err != nil {
		return nil, false, err
	}
	s = d.newSession(c, period)
	for _, k := range keys {
		s.keys[k]++
	}
	s.n, s.busy = 1, 1
	s.use <- struct{}{}
	s.w.Pause()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		c.close()
		return nil, false, errClosed
	}
	d.sessions = append(d.sessions, s)
	d.mu.Unlock()
	s.startKeeper()
	return s, reused, nil
}

// pickLocked returns the session to ask for keys, or nil to open one:
// one nothing is using; else a new one, on an idle connection or when
// every session is in other acquisitions' hands; else one only a release
// or a ping is using; and once busySessions are open, the one fewest
// acquisitions are using. Driver.mu is held.
func (d *Driver) pickLocked(keys []int64, period time.Duration) *session {
	var unused, spare *session
	for _, s := range d.sessions {
		if s.n >= d.sessionLocks || s.period != period || s.holdsAny(keys) {
			continue
		}
		if s.busy == 0 {
			if len(s.use) == 0 { // nor is a release or a ping, at a glance
				return s
			}
			unused = s
		}
		if spare == nil || s.busy < spare.busy {
			spare = s
		}
	}
	switch {
	case len(d.sessions) >= busySessions:
		return spare
	case len(d.idle) > 0, spare == nil, spare.busy > 0:
		// An idle connection opens a session at no cost; and when every
		// session is in other acquisitions' hands, one more runs side by
		// side rather than after them.
		return nil
	}
	return unused // nothing but a release or a ping has it: wait for it
}

// holdsAny reports whether s holds or is asked for one of keys;
// Driver.mu is held.
func (s *session) holdsAny(keys []int64) bool {
	for _, k := range keys {
		if s.keys[k] > 0 {
			return true
		}
	}
	return false
}

// dropReservation gives back a reservation on a session whose use the
// caller did not get. A session it leaves with nothing retires once its
// use is free.
func (s *session) dropReservation(keys []int64) {
	d := s.d
	d.mu.Lock()
	for _, k := range keys {
		s.unkeyLocked(k)
	}
	s.n--
	s.busy--
	empty := s.n == 0
	d.mu.Unlock()
	if empty {
		s.d.bg.Go(s.retireIfEmpty)
	}
}

// retireIfEmpty retires s if it still holds nothing once its use is free.
func (s *session) retireIfEmpty() {
	if s.take(context.Background()) == nil {
		s.putBack(nil, 0)
	}
}
