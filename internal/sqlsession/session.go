// Package sqlsession is the session machine the SQL backends (pglock,
// mysqllock) share: a held lock lives on one of the driver's connections,
// a session, with up to Config.Locks others, and is lost with it.
//
// A Session has a use slot (one statement at a time, waited for at most
// until the caller's context ends), a watch of its socket
// (internal/sockwatch) and a keeper goroutine that waits on the watch and
// runs the backend's keep-alive check every period. A lost connection
// loses every lock on it at once, in one order: the loss recorded (for
// Check), the session taken out of the pool, each lock's loss signalled,
// and only then the connection closed, whatever the close costs. A
// session left holding nothing retires, giving its connection back.
//
// A backend supplies Conn (the keep-alive check, what a closed socket
// means, closing and giving back a connection) and runs its own
// statements while it has a session's use.
package sqlsession

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/internal/sockwatch"
)

// Conn is a session's connection, as its backend drives it.
type Conn interface {
	// Keep runs a keep-alive check, in the caller's use; an error is a loss.
	Keep() error
	// Gone describes a socket found closed (errno 0) or failing.
	Gone(errno syscall.Errno) error
	// Watch returns the watch of the socket (once the first lock is taken).
	Watch() *sockwatch.Watch
	// Close closes a lost session's connection, which frees what it holds.
	Close()
	// Retire gives back the connection of a session that holds nothing.
	Retire()
}

// A Session is a connection while it holds or is asked for locks. Its
// exported fields are set when it is made.
type Session[C Conn, K comparable, X any] struct {
	p *Pool[C, K, X]
	// C is the backend's connection.
	C C
	// Class groups sessions locks may share (a period, a server timeout).
	Class time.Duration
	w     *sockwatch.Watch
	stop  chan struct{} // closed when the session ends: stops the keeper
	// loss is set once, before its locks' losses are signalled and the close.
	loss atomic.Pointer[error]

	// use is a one-slot semaphore guarding C and ended: unlike a mutex,
	// its wait can end with a context, so that a release never waits past
	// its context for a keep-alive check stuck on a silent server.
	use   chan struct{}
	ended bool // retired or lost

	// Guarded by the pool's mutex.
	holds map[*Hold[C, K, X]]struct{}
	keys  map[K]int // keys held or being asked for on the session
	n     int       // holds and acquisitions under way
	busy  int       // acquisitions under way
	gone  bool      // no longer among the sessions acquisitions pick
}

// ErrEnded is Take's error when the session ended while it waited.
var ErrEnded = errors.New("session ended")

// Loss returns why s was lost, or nil.
func (s *Session[C, K, X]) Loss() error {
	if p := s.loss.Load(); p != nil {
		return *p
	}
	return nil
}

// Fresh reports whether s has yet to take its first lock (see Pool.Adopt);
// the caller has its use.
func (s *Session[C, K, X]) Fresh() bool { return s.w == nil }

// Take takes the use slot, waiting at most until ctx ends, then the
// socket from the watch with a look (see sockwatch.Watch.Take). The error
// is ctx's, ErrEnded, or the loss when the look found the server gone
// (Take then ended the session as lost). With a nil error the caller has
// the use of s until Release.
func (s *Session[C, K, X]) Take(ctx context.Context) error {
	select {
	case s.use <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.ended {
		<-s.use
		return ErrEnded
	}
	if v, errno := s.w.Take(); v == sockwatch.VGone {
		return s.EndLost(s.C.Gone(errno))
	}
	return nil
}

// Ended reports whether the watch has found the session ended by the
// server while the caller's statement ran (see sockwatch.Watch.Ended):
// its reply, even one that says the lock is held, predates the loss.
func (s *Session[C, K, X]) Ended() bool { return s.w.Ended() }

// Release gives the socket back to the watch, and the use slot back.
func (s *Session[C, K, X]) Release() {
	s.w.Resume()
	<-s.use
}

// Occupy takes s's use until free, as a stuck check would (for tests).
func (s *Session[C, K, X]) Occupy() (free func()) {
	s.use <- struct{}{}
	s.w.Pause()
	return s.Release
}

// noteLoss records cause as the loss if none is, and returns the loss.
func (s *Session[C, K, X]) noteLoss(cause error) error {
	s.loss.CompareAndSwap(nil, &cause)
	return *s.loss.Load()
}

// keep is the keeper goroutine. While no statement runs, it waits for the
// socket to speak (ending the session as lost when the server hung up) or
// for the next period, then runs the keep-alive check, which also reads
// what the server sent unprompted (a notice, or an error that fails it).
// An unwatched socket is checked on the timer alone.
func (s *Session[C, K, X]) keep() {
	defer s.p.keepers.Done()
	watched := s.w.Watched() && !s.p.Hooks.TimerKeeper.Load()
	period := s.p.cfg.Period(s.Class) // between two keep-alive checks
	next := time.Now().Add(period)
	for {
		ev := sockwatch.EvDeadline
		if watched {
			var errno syscall.Errno
			ev, errno = s.w.Wait(next)
			switch ev {
			case sockwatch.EvStopped:
				return
			case sockwatch.EvGone:
				s.Lose(s.C.Gone(errno))
				return
			}
		} else if !s.sleepUntil(next) {
			return
		}
		if ev == sockwatch.EvDeadline {
			next = time.Now().Add(period)
		}
		if f := s.p.Hooks.Freeze.Load(); f != nil {
			select {
			case <-*f:
			case <-s.stop:
				return
			}
		}
		if !s.keepOrLose() {
			return
		}
		if ev == sockwatch.EvData && s.stillData() {
			// Bytes the check left would wake the watch at once: sleep instead.
			if !s.sleepUntil(next) {
				return
			}
		}
	}
}

// stillData reports whether bytes a check should have read are still there.
func (s *Session[C, K, X]) stillData() bool {
	v, _ := s.w.Look()
	return v == sockwatch.VData
}

// sleepUntil waits until t; false when the session ended first.
func (s *Session[C, K, X]) sleepUntil(t time.Time) bool {
	select {
	case <-s.stop:
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

// keepOrLose runs a check, losing the session if it fails; false if ended.
func (s *Session[C, K, X]) keepOrLose() bool {
	if err := s.Take(context.Background()); err != nil {
		return false // ended, or Take found the server gone and ended it
	}
	if err := s.C.Keep(); err != nil {
		s.EndLost(err)
		return false
	}
	s.Release()
	return true
}

// Lose ends the session as lost, with every lock on it: see EndLost.
func (s *Session[C, K, X]) Lose(cause error) {
	cause = s.noteLoss(cause)
	s.use <- struct{}{}
	if s.ended {
		<-s.use
		return
	}
	s.EndLost(cause)
}

// EndLost is Lose for a caller that has the use of s, not yet ended; it
// gives the use back and returns the recorded loss. It ends the locks in
// the package doc's order; the close makes the server free them, if it
// still has them.
func (s *Session[C, K, X]) EndLost(cause error) error {
	cause = s.noteLoss(cause)
	s.end()
	p := s.p
	p.mu.Lock()
	p.dropLocked(s)
	holds := make([]*Hold[C, K, X], 0, len(s.holds))
	for h := range s.holds {
		delete(s.holds, h)
		p.endLocked(h)
		holds = append(holds, h)
	}
	p.mu.Unlock()
	<-s.use
	for _, h := range holds {
		h.noteLoss(cause)
		h.notice.Signal()
	}
	s.C.Close()
	return cause
}

// Unreserve gives back keys reserved on s that took no lock, and its use.
func (s *Session[C, K, X]) Unreserve(keys ...K) {
	s.p.mu.Lock()
	s.busy--
	s.p.mu.Unlock()
	s.putBack(keys, 1)
}

// putBack gives back s's use, places places and keys; retires s if left empty.
func (s *Session[C, K, X]) putBack(keys []K, places int) {
	p := s.p
	p.mu.Lock()
	s.unkeyLocked(keys...)
	s.n -= places
	retire := s.n == 0
	if retire {
		p.dropLocked(s)
	}
	p.mu.Unlock()
	if retire {
		s.retire()
		return
	}
	s.Release()
}

// unkeyLocked drops one count of each of keys; the pool's mutex is held.
func (s *Session[C, K, X]) unkeyLocked(keys ...K) {
	for _, k := range keys {
		if s.keys[k]--; s.keys[k] <= 0 {
			delete(s.keys, k)
		}
	}
}

// retire ends s, holding nothing and in the caller's use, and Retires C.
func (s *Session[C, K, X]) retire() {
	s.end()
	<-s.use
	s.C.Retire()
}

// end marks s, in the caller's use, ended, and stops its keeper and watch
// (paused by Take: it never looks again).
func (s *Session[C, K, X]) end() {
	s.ended = true
	if s.w != nil {
		s.w.Stop()
	}
	close(s.stop)
}

// drop gives back keys reserved on s whose use the caller did not get;
// one left with nothing retires once its use is free.
func (s *Session[C, K, X]) drop(keys []K) {
	p := s.p
	p.mu.Lock()
	s.unkeyLocked(keys...)
	s.n--
	s.busy--
	empty := s.n == 0
	p.mu.Unlock()
	if empty {
		p.bg.Go(s.retireIfEmpty)
	}
}

// retireIfEmpty retires s if it still holds nothing once its use is free.
func (s *Session[C, K, X]) retireIfEmpty() {
	if s.Take(context.Background()) == nil {
		s.putBack(nil, 0)
	}
}

// holdsAny reports whether s holds or is asked for one of keys (mutex held).
func (s *Session[C, K, X]) holdsAny(keys []K) bool {
	for _, k := range keys {
		if s.keys[k] > 0 {
			return true
		}
	}
	return false
}
