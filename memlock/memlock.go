package memlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockgo/dlock"
	"github.com/dlockgo/dlock/driver"
)

func init() {
	dlock.Register("mem", open)
}

var stores = struct {
	sync.Mutex
	m map[string]*Store
}{m: map[string]*Store{}}

func open(_ context.Context, u driver.URL) (driver.Driver, error) {
	if err := u.Unknown(); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, u.Err("path", u.Path, fmt.Errorf("mem URLs take a store name as host (mem://name), not a path"))
	}
	stores.Lock()
	defer stores.Unlock()
	s := stores.m[u.Host]
	if s == nil {
		s = NewStore()
		stores.m[u.Host] = s
	}
	return s.Driver(), nil
}

// A Store holds the locks of one in-process namespace. The zero value is
// not usable; call NewStore. A Store is safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	locks map[string]*entry
	seq   uint64 // the last fencing token issued, for all names
}

type entry struct {
	owner   string
	token   uint64
	expires time.Time
	queue   []*waiter // FIFO
}

type waiter struct {
	owner string
	ttl   time.Duration
	grant chan driver.Grant // buffered 1; receives the handoff
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{locks: map[string]*entry{}}
}

// New returns a Locker over store s (a new store when s is nil).
func New(s *Store, opts ...dlock.Option) (*dlock.Locker, error) {
	if s == nil {
		s = NewStore()
	}
	return dlock.New(s.Driver(), opts...)
}

// Driver returns a driver over the store. Drivers of one store share its
// locks, as clients of one server do.
func (s *Store) Driver() *Driver { return &Driver{s: s} }

// Driver implements driver.Driver and driver.Waiter over a Store.
// It is safe for concurrent use.
type Driver struct {
	s *Store
}

// Scheme returns "mem".
func (d *Driver) Scheme() string { return "mem" }

// Store returns the driver's store.
func (d *Driver) Store() *Store { return d.s }

// held returns the live entry for name, or nil. It drops an expired holder
// (handing the lock to the first waiter). s.mu must be held.
func (s *Store) held(name string, now time.Time) *entry {
	e := s.locks[name]
	if e == nil {
		return nil
	}
	if e.owner != "" && !now.Before(e.expires) {
		e.owner = ""
		s.handoff(name, e, now)
	}
	if e.owner == "" {
		if len(e.queue) == 0 {
			delete(s.locks, name)
		}
		return nil
	}
	return e
}

// grantTo makes owner the holder of e. s.mu must be held.
func (s *Store) grantTo(e *entry, owner string, ttl time.Duration, now time.Time) driver.Grant {
	s.seq++
	e.owner, e.token, e.expires = owner, s.seq, now.Add(ttl)
	return driver.Grant{Token: s.seq, Expires: e.expires}
}

// handoff gives a free lock to the first waiter in line. s.mu must be held.
func (s *Store) handoff(name string, e *entry, now time.Time) {
	if len(e.queue) == 0 {
		delete(s.locks, name)
		return
	}
	w := e.queue[0]
	e.queue = e.queue[1:]
	w.grant <- s.grantTo(e, w.owner, w.ttl, now)
}

// TryLock implements driver.Driver.
func (d *Driver) TryLock(_ context.Context, r driver.Request) (driver.Grant, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(r.Name, now)
	if e != nil {
		if e.owner == r.Owner {
			return driver.Grant{Token: e.token, Expires: e.expires}, nil
		}
		return driver.Grant{}, &driver.HeldError{Name: r.Name, Remaining: e.expires.Sub(now)}
	}
	e = s.locks[r.Name]
	if e == nil {
		e = &entry{}
		s.locks[r.Name] = e
	}
	return s.grantTo(e, r.Owner, r.TTL, now), nil
}

// Lock implements driver.Waiter: it queues behind the holder and earlier
// waiters and is handed the lock directly when its turn comes.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	e := s.held(r.Name, now)
	if e == nil {
		e = s.locks[r.Name]
		if e == nil {
			e = &entry{}
			s.locks[r.Name] = e
		}
		g := s.grantTo(e, r.Owner, r.TTL, now)
		s.mu.Unlock()
		return g, nil
	}
	w := &waiter{owner: r.Owner, ttl: r.TTL, grant: make(chan driver.Grant, 1)}
	e.queue = append(e.queue, w)
	remaining := e.expires.Sub(now)
	s.mu.Unlock()

	timer := time.NewTimer(remaining)
	defer timer.Stop()
	for {
		select {
		case g := <-w.grant:
			return g, nil
		case <-timer.C:
			// The holder may have crashed: expire it, which hands the lock
			// to the head of the queue (perhaps not us).
			now := time.Now()
			s.mu.Lock()
			if e := s.held(r.Name, now); e != nil {
				timer.Reset(max(e.expires.Sub(now), time.Millisecond))
			}
			s.mu.Unlock()
		case <-ctx.Done():
			d.abandon(r, w)
			return driver.Grant{}, ctx.Err()
		}
	}
}

// abandon removes a waiter whose context ended; if the lock was handed to
// it meanwhile, it passes the lock on.
func (d *Driver) abandon(r driver.Request, w *waiter) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.locks[r.Name]
	if e == nil {
		return
	}
	for i, q := range e.queue {
		if q == w {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			if e.owner == "" && len(e.queue) == 0 {
				delete(s.locks, r.Name)
			}
			return
		}
	}
	select {
	case <-w.grant:
		if e.owner == r.Owner {
			e.owner = ""
			s.handoff(r.Name, e, time.Now())
		}
	default:
	}
}

// Refresh implements driver.Driver.
func (d *Driver) Refresh(_ context.Context, r driver.Request) (time.Time, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(r.Name, now)
	if e == nil || e.owner != r.Owner {
		return time.Time{}, fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	e.expires = now.Add(r.TTL)
	return e.expires, nil
}

// Unlock implements driver.Driver; it hands the lock to the next waiter.
func (d *Driver) Unlock(_ context.Context, r driver.Request) error {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(r.Name, now)
	if e == nil || e.owner != r.Owner {
		return fmt.Errorf("%w: %q", driver.ErrNotHeld, r.Name)
	}
	e.owner = ""
	s.handoff(r.Name, e, now)
	return nil
}

// Revoke removes the lock called name whoever holds it, as an operator
// would on a server; the holder learns of it at its next renewal. The next
// waiter in line gets the lock.
func (s *Store) Revoke(name string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.held(name, now); e != nil {
		e.owner = ""
		s.handoff(name, e, now)
	}
}

// Close implements driver.Driver. The store and its locks stay: other
// drivers may still use them.
func (d *Driver) Close() error { return nil }
