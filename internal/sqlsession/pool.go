package sqlsession

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/bg"
)

// A Pool is a driver's sessions and held locks, under the driver's own
// mutex, so that the driver's state and the pool's change together.
type Pool[C Conn, K comparable, X any] struct {
	mu     *sync.Mutex
	closed *bool // the driver's, guarded by mu
	bg     *bg.Group
	cfg    Config[C, K, X]

	// Hooks are for tests.
	Hooks Hooks

	keepers sync.WaitGroup // the sessions' keeper goroutines

	// Guarded by mu.
	sessions []*Session[C, K, X] // those acquisitions may pick
	held     map[string]*Hold[C, K, X]
}

// Config is what a backend tells its pool.
type Config[C Conn, K comparable, X any] struct {
	// Locks is how many locks a session holds at most.
	Locks int
	// Open returns a fresh session of class (see Init), on an idle
	// connection of the backend's or a new one.
	Open func(ctx context.Context, class time.Duration) (*Session[C, K, X], error)
	// Period returns the keep-alive period of sessions of class.
	Period func(class time.Duration) time.Duration
	// Idle, if set, reports under the mutex whether an idle connection waits.
	Idle func() bool
	// Adopted and Ended, if set, run under the mutex as a hold begins and ends.
	Adopted, Ended func(h *Hold[C, K, X])
}

// Hooks are switches for tests; the zero value is what production runs.
type Hooks struct {
	// NoKeeper grants locks without keepers, as if they had not run yet.
	NoKeeper atomic.Bool
	// TimerKeeper makes new keepers check on the timer alone, not the socket.
	TimerKeeper atomic.Bool
	// Freeze, while set, pauses the keep-alive checks until it is closed.
	Freeze atomic.Pointer[chan struct{}]
	// Refuse fails the backend's new connections, as for a crashed process.
	Refuse atomic.Bool
}

// NewPool returns the pool of a driver with mutex mu, closed flag closed
// (guarded by mu) and background goroutines group (Close waits for them).
func NewPool[C Conn, K comparable, X any](mu *sync.Mutex, closed *bool, group *bg.Group, cfg Config[C, K, X]) *Pool[C, K, X] {
	return &Pool[C, K, X]{mu: mu, closed: closed, bg: group, cfg: cfg, held: map[string]*Hold[C, K, X]{}}
}

// busySessions is how many sessions a pool opens while every session
// with room runs a statement, so that concurrent acquisitions run side by
// side, before they wait for one another's statements.
const busySessions = 16

// Session returns a session of class with room and none of keys, else a
// fresh one from Config.Open, in the caller's use, with keys and a place
// reserved (Session.Unreserve gives them back, Adopt makes them a hold).
// ctx bounds the wait for a session and the opening of a connection.
func (p *Pool[C, K, X]) Session(ctx context.Context, class time.Duration, keys ...K) (*Session[C, K, X], error) {
	for {
		p.mu.Lock()
		if *p.closed {
			p.mu.Unlock()
			return nil, driver.ErrClosed
		}
		s := p.pickLocked(keys, class)
		if s != nil {
			for _, k := range keys {
				s.keys[k]++
			}
			s.n++
			s.busy++
		}
		p.mu.Unlock()
		if s == nil {
			break
		}
		switch err := s.Take(ctx); {
		case err == nil:
			return s, nil
		case ctx.Err() != nil:
			s.drop(keys)
			return nil, ctx.Err()
		}
		// The session ended meanwhile: pick again.
		s.drop(keys)
	}
	// Not reserved by Open: through a func value, keys would escape (allocate).
	s, err := p.cfg.Open(ctx, class)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		s.keys[k]++
	}
	return s, nil
}

// Init makes s (the backend may allocate it with its connection) a fresh
// session of class on c, reserved for keys and in the caller's use as
// from Session, and returns it. It joins the pool at its first Adopt.
func (p *Pool[C, K, X]) Init(s *Session[C, K, X], c C, class time.Duration, keys ...K) *Session[C, K, X] {
	*s = Session[C, K, X]{
		p:     p,
		C:     c,
		Class: class,
		stop:  make(chan struct{}),
		use:   make(chan struct{}, 1),
		holds: map[*Hold[C, K, X]]struct{}{},
		keys:  make(map[K]int, max(len(keys), 1)),
		n:     1,
		busy:  1,
	}
	for _, k := range keys {
		s.keys[k]++
	}
	s.use <- struct{}{}
	return s
}

// pickLocked returns the session to ask for keys, or nil to open one: one
// nothing uses; else a new one, on an idle connection or when every session
// is in other acquisitions' hands; else one only a release or a check
// uses; once busySessions are open, the one fewest acquisitions use.
func (p *Pool[C, K, X]) pickLocked(keys []K, class time.Duration) *Session[C, K, X] {
	var unused, spare *Session[C, K, X]
	for _, s := range p.sessions {
		if s.n >= p.cfg.Locks || s.Class != class || s.holdsAny(keys) {
			continue
		}
		if s.busy == 0 {
			if len(s.use) == 0 { // nor is a release or a check, at a glance
				return s
			}
			unused = s
		}
		if spare == nil || s.busy < spare.busy {
			spare = s
		}
	}
	switch {
	case len(p.sessions) >= busySessions:
		return spare
	case p.cfg.Idle != nil && p.cfg.Idle(), spare == nil, spare.busy > 0:
		// An idle connection costs nothing; and when every session is in
		// other acquisitions' hands, one more runs beside them.
		return nil
	}
	return unused // nothing but a release or a check has it: wait for it
}

// Adopt makes h, the lock just taken on h.S for keys, a hold of h.S,
// giving back the other keys and the session's use, which the caller has.
// A fresh session is watched from now on, joins the sessions to pick, and
// its keeper starts. After Close, it ends the session as lost and returns
// driver.ErrClosed.
func (p *Pool[C, K, X]) Adopt(h *Hold[C, K, X], keys ...K) error {
	s := h.S
	fresh := s.w == nil
	if fresh {
		s.w = s.C.Watch()
		s.w.Start()
		s.w.Pause()
	}
	p.mu.Lock()
	if *p.closed {
		p.mu.Unlock()
		s.EndLost(driver.ErrClosed)
		return driver.ErrClosed
	}
	kept := false
	for _, k := range keys {
		if k == h.Key && !kept {
			kept = true
			continue
		}
		s.unkeyLocked(k)
	}
	if !kept {
		s.keys[h.Key]++
	}
	s.busy--
	s.holds[h] = struct{}{}
	p.held[h.Owner] = h
	if p.cfg.Adopted != nil {
		p.cfg.Adopted(h)
	}
	keeper := fresh && !p.Hooks.NoKeeper.Load()
	if fresh {
		p.sessions = append(p.sessions, s)
	}
	if keeper {
		p.keepers.Add(1) // before Close's LoseAll waits: see closed
	}
	p.mu.Unlock()
	if keeper {
		go s.keep()
	}
	s.Release()
	return nil
}

// Held returns the hold of owner, or nil.
func (p *Pool[C, K, X]) Held(owner string) *Hold[C, K, X] {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[owner]
}

// Forget drops h from the held locks (a release is under way).
func (p *Pool[C, K, X]) Forget(h *Hold[C, K, X]) {
	p.mu.Lock()
	if p.held[h.Owner] == h {
		delete(p.held, h.Owner)
	}
	p.mu.Unlock()
}

// endLocked forgets h, which has ended; the mutex is held.
func (p *Pool[C, K, X]) endLocked(h *Hold[C, K, X]) {
	if h.ended {
		return
	}
	h.ended = true
	if p.held[h.Owner] == h {
		delete(p.held, h.Owner)
	}
	if p.cfg.Ended != nil {
		p.cfg.Ended(h)
	}
}

// dropLocked takes s out of the sessions to pick; the mutex is held.
func (p *Pool[C, K, X]) dropLocked(s *Session[C, K, X]) {
	if s.gone {
		return
	}
	s.gone = true
	if i := slices.Index(p.sessions, s); i >= 0 {
		p.sessions = slices.Delete(p.sessions, i, i+1)
	}
}

// LoseAll ends every session as lost with cause and waits for their
// keepers, for the driver's Close, once its closed flag keeps new ones out.
func (p *Pool[C, K, X]) LoseAll(cause error) {
	p.mu.Lock()
	sessions := slices.Clone(p.sessions)
	p.mu.Unlock()
	for _, s := range sessions {
		s.Lose(cause)
	}
	p.keepers.Wait()
}

// ConnsLocked returns the sessions' and holds' connections (for tests).
func (p *Pool[C, K, X]) ConnsLocked() []C {
	var cs []C
	for _, s := range p.sessions {
		cs = append(cs, s.C)
	}
	// A retiring session may still hold a lock.
	for _, h := range p.held {
		cs = append(cs, h.S.C)
	}
	return cs
}

// Len returns how many sessions acquisitions may pick, and held locks.
func (p *Pool[C, K, X]) Len() (sessions, held int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions), len(p.held)
}
