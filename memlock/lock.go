package memlock

import (
	"context"
	"slices"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// kind is a namespace of names: the mutex "x" is not the rw lock "x".
type kind uint8

const (
	kindMutex kind = iota
	kindRW
	kindSemaphore
	kindElection
)

func kindOf(m driver.Mode) kind {
	switch m {
	case driver.Read, driver.Write:
		return kindRW
	case driver.Permit:
		return kindSemaphore
	case driver.Leader:
		return kindElection
	}
	return kindMutex
}

type key struct {
	kind kind
	name string
}

// An entry is one lock's holders and waiters, while it has either.
type entry struct {
	key     key
	holders []holder  // few: a linear search is the simplest map
	queue   []*waiter // FIFO

	// timer fires at wake, the holders' earliest expiry, to drop a holder
	// that stopped renewing and tell those who wait or observe; it runs
	// only while someone does, else the next call to look drops it.
	timer *time.Timer
	wake  time.Time
}

type holder struct {
	owner   string
	mode    driver.Mode
	token   uint64
	expires time.Time
	value   string // the candidate's value, in an election
}

type waiter struct {
	r     driver.Request
	grant chan driver.Grant // buffered 1; receives the handoff
}

// holder returns r's owner's holder in r's mode, until e changes.
func (e *entry) holder(r driver.Request) *holder {
	for i := range e.holders {
		if h := &e.holders[i]; h.owner == r.Owner && h.mode == r.Mode {
			return h
		}
	}
	return nil
}

// remove drops owner's holder entry and reports whether there was one.
func (e *entry) remove(owner string) bool {
	for i := range e.holders {
		if e.holders[i].owner == owner {
			e.holders = slices.Delete(e.holders, i, i+1)
			return true
		}
	}
	return false
}

// admits reports whether the holders let r in (the caller sees to the queue).
func (e *entry) admits(r driver.Request) bool {
	switch r.Mode {
	case driver.Read:
		for _, h := range e.holders {
			if h.mode == driver.Write {
				return false
			}
		}
		return true
	case driver.Permit:
		return len(e.holders) < r.Limit
	}
	return len(e.holders) == 0 // Exclusive, Write, Leader
}

// earliest returns the holders' earliest expiry, or the zero time.
func (e *entry) earliest() time.Time {
	var t time.Time
	for _, h := range e.holders {
		if t.IsZero() || h.expires.Before(t) {
			t = h.expires
		}
	}
	return t
}

// entry returns r's lock's live entry, new if need be; the caller ends
// with settle, which drops it if empty. s.mu is held.
func (s *Store) entry(r driver.Request, now time.Time) *entry {
	k := key{kindOf(r.Mode), r.Name}
	if e := s.locks[k]; e != nil {
		s.settle(e, now)
		if s.locks[k] == e { // else settle dropped it
			return e
		}
	}
	e := &entry{key: k}
	s.locks[k] = e
	return e
}

// grant makes r's owner a holder of e with a new token; s.mu is held.
func (s *Store) grant(e *entry, r driver.Request, now time.Time) driver.Grant {
	s.seq++
	h := holder{owner: r.Owner, mode: r.Mode, token: s.seq, expires: now.Add(r.TTL), value: r.Value}
	e.holders = append(e.holders, h)
	return driver.Grant{Token: h.token, Expires: h.expires}
}

// tryGrant grants r if nobody waits ahead and e admits it; s.mu is held.
func (s *Store) tryGrant(e *entry, r driver.Request, now time.Time) (driver.Grant, bool) {
	if len(e.queue) > 0 || !e.admits(r) {
		return driver.Grant{}, false
	}
	g := s.grant(e, r, now)
	s.settle(e, now)
	return g, true
}

// settle brings e up to date after any change: it drops expired holders,
// admits waiters from the head of the queue while the lock's rules allow
// (consecutive readers together; a writer at the head holds back the
// readers behind it), drops the entry when nobody holds or waits, re-arms
// the timer, and tells an election's observers. s.mu is held.
func (s *Store) settle(e *entry, now time.Time) {
	e.holders = slices.DeleteFunc(e.holders, func(h holder) bool { return !now.Before(h.expires) })
	for len(e.queue) > 0 && e.admits(e.queue[0].r) {
		w := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		w.grant <- s.grant(e, w.r, now)
	}
	switch {
	case len(e.holders) == 0 && len(e.queue) == 0:
		if s.locks[e.key] == e {
			delete(s.locks, e.key)
		}
		if e.timer != nil {
			e.timer.Stop()
		}
	case len(e.queue) > 0 || (e.key.kind == kindElection && len(s.observers[e.key.name]) > 0):
		s.arm(e)
	case e.timer != nil:
		e.timer.Stop()
		e.wake = time.Time{}
	}
	if e.key.kind == kindElection {
		s.notify(e.key.name)
	}
}

// arm sets e's timer to its holders' earliest expiry; s.mu is held.
func (s *Store) arm(e *entry) {
	wake := e.earliest()
	if wake.Equal(e.wake) {
		return
	}
	e.wake = wake
	if e.timer == nil {
		e.timer = time.AfterFunc(time.Until(wake), func() { s.expired(e) })
		return
	}
	e.timer.Reset(time.Until(wake))
}

// expired runs on e's timer: a holder's expiry has come.
func (s *Store) expired(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locks[e.key] != e {
		return // dropped meanwhile
	}
	e.wake = time.Time{} // the timer has fired: settle must arm it again
	s.settle(e, time.Now())
}

// Resume implements driver.Resumer: a lock lives in the Store, not in the
// Driver that took it, so any Driver on the same Store with the
// acquisition's owner value may renew and release. It renews the
// lock, owner-checked, as Renew does; a lock that expired or passed to
// another owner is left as it is.
func (d *Driver) Resume(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return driver.ResumeByRenew(ctx, d, r)
}
