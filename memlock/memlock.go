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

// A Store holds the locks of one in-process namespace; the zero value is
// not usable (call NewStore). It is safe for concurrent use: one mutex
// guards it, every operation a short critical section over a lock's
// holders and FIFO queue (see lock.go).
type Store struct {
	mu        sync.Mutex
	locks     map[key]*entry
	seq       uint64                 // the last fencing token issued, for all locks
	observers map[string][]*observer // by election name
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{locks: map[key]*entry{}, observers: map[string][]*observer{}}
}

// New returns a Locker over store s (a new store when s is nil).
func New(s *Store, opts ...dlock.Option) (*dlock.Locker, error) {
	if s == nil {
		s = NewStore()
	}
	return dlock.New(s.Driver(), opts...)
}

// Driver returns a driver over the store, sharing its locks with others.
func (s *Store) Driver() *Driver { return &Driver{s: s, observers: map[*observer]struct{}{}} }

// Driver implements driver.Driver, driver.Waiter, driver.Moder (every
// mode) and driver.Elector over a Store, safe for concurrent use.
type Driver struct {
	s *Store

	// Guarded by s.mu.
	closed    bool
	observers map[*observer]struct{}
}

// Scheme returns "mem".
func (d *Driver) Scheme() string { return "mem" }

// Store returns the driver's store.
func (d *Driver) Store() *Store { return d.s }

// Supports implements driver.Moder: memlock has every kind of lock.
func (d *Driver) Supports(m driver.Mode) bool { return m <= driver.Leader }

// TryLock implements driver.Driver. It grants only when nobody waits
// ahead of the request and the lock's rules admit it.
func (d *Driver) TryLock(_ context.Context, r driver.Request) (driver.Grant, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(r, now)
	if h := e.holder(r); h != nil {
		return driver.Grant{Token: h.token, Expires: h.expires}, nil
	}
	if g, ok := s.tryGrant(e, r, now); ok {
		return g, nil
	}
	remaining := e.earliest().Sub(now)
	s.settle(e, now) // drops the entry if this attempt created it
	return driver.Grant{}, &driver.HeldError{Name: r.Name, Remaining: remaining}
}

// Lock implements driver.Waiter: it joins the lock's FIFO queue unless it
// can be granted at once, and is handed the lock when its turn comes.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	e := s.entry(r, now)
	if g, ok := s.tryGrant(e, r, now); ok {
		s.mu.Unlock()
		return g, nil
	}
	w := &waiter{r: r, grant: make(chan driver.Grant, 1)}
	e.queue = append(e.queue, w)
	s.settle(e, now) // arms the expiry timer, now that someone waits
	s.mu.Unlock()

	select {
	case g := <-w.grant:
		return g, nil
	case <-ctx.Done():
		d.abandon(e, w)
		return driver.Grant{}, ctx.Err()
	}
}

// abandon takes a waiter whose context ended out of the queue, or gives
// up the lock handed to it meanwhile; either way the waiters behind it may
// be admitted (readers behind a writer that gave up, say).
func (d *Driver) abandon(e *entry, w *waiter) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range e.queue {
		if q == w {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			s.settle(e, now)
			return
		}
	}
	select {
	case <-w.grant:
		if e.remove(w.r.Owner) {
			s.settle(e, now)
		}
	default:
	}
}

// Renew implements driver.Driver.
func (d *Driver) Renew(_ context.Context, r driver.Request) (time.Time, error) {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(r, now)
	h := e.holder(r)
	if h == nil {
		s.settle(e, now)
		return time.Time{}, fmt.Errorf("%w: %s lock %q", driver.ErrNotHeld, r.Mode, r.Name)
	}
	h.expires = now.Add(r.TTL)
	s.settle(e, now)
	return h.expires, nil
}

// Unlock implements driver.Driver; the waiters now admitted get it in order.
func (d *Driver) Unlock(_ context.Context, r driver.Request) error {
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(r, now)
	if e.holder(r) == nil {
		s.settle(e, now)
		return fmt.Errorf("%w: %s lock %q", driver.ErrNotHeld, r.Mode, r.Name)
	}
	e.remove(r.Owner)
	s.settle(e, now)
	return nil
}

// Revoke removes the mutex called name whoever holds it, as an operator
// would on a server: the holder learns of it at its next renewal, and the
// next waiter in line gets the lock.
func (s *Store) Revoke(name string) {
	s.revoke(key{kindMutex, name})
}

// RevokeLeader removes the leader of the election called name, as Revoke
// does a mutex: observers see it, and the next candidate is elected.
func (s *Store) RevokeLeader(name string) {
	s.revoke(key{kindElection, name})
}

func (s *Store) revoke(k key) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.locks[k]; e != nil {
		e.holders = nil
		s.settle(e, now)
	}
}

// Close implements driver.Driver: it closes its observers' channels; the
// store and its locks stay for other drivers.
func (d *Driver) Close() error {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	d.closed = true
	for o := range d.observers {
		s.dropObserver(o)
	}
	return nil
}

var (
	_ driver.Inspector = (*Driver)(nil)
	_ driver.Schemer   = (*Driver)(nil)
	_ driver.Resumer   = (*Driver)(nil)
)
