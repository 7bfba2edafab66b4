package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/internal/sockwatch"
)

// A session is one of the driver's connections while it holds locks: up
// to Options.SessionLocks of them, each a hold. It has the watch of the
// connection's socket and one keeper goroutine that waits on the watch and
// pings the server, for all its locks: when the connection is lost, every
// lock on it is lost at once.
//
// A pgx.Conn runs one statement at a time, so whoever runs one (an
// acquisition, a release, a check, the keeper) first takes the session's
// use slot, waiting for it at most until its context ends.
//
// Session-level advisory locks are re-entrant within a session, so a
// session is never asked for a key that it holds or is being asked for
// (keys): the driver picks another session, or opens one.
type session struct {
	d       *Driver
	c       *conn
	w       *sockwatch.Watch
	period  time.Duration // between two keep-alive pings
	timeout time.Duration // bounds a ping: a longer one is a lost connection
	byTimer bool          // keep pings on the timer alone (Driver.timerKeeper)
	stop    chan struct{} // closed when the session ends: stops the keeper
	// loss is why the session was lost, set (once) before its locks' Lost
	// close and before the connection is closed.
	loss atomic.Pointer[error]

	// use is a one-slot semaphore: whoever fills it may use c and ended.
	// Unlike a mutex, waiting for it can end with a context, so that a
	// release never waits past its context for a keep-alive check stuck
	// on a silent server.
	use   chan struct{}
	ended bool // retired (its connection went back to the driver) or lost

	// Guarded by Driver.mu.
	holds map[*hold]struct{}
	keys  map[int64]int // keys held or being asked for on the session
	n     int           // holds and acquisitions under way
	busy  int           // acquisitions under way
	gone  bool          // no longer among Driver.sessions
}

// stmtTimeouts is how many ping timeouts a statement on a shared session
// may take before the session counts as lost: long enough for a server
// under load, short enough that a silent one does not keep the session.
const stmtTimeouts = 4

func (d *Driver) newSession(c *conn, period time.Duration) *session {
	return &session{
		d:       d,
		c:       c,
		w:       c.newWatch(),
		period:  period,
		timeout: max(period, time.Second),
		byTimer: d.timerKeeper.Load(),
		stop:    make(chan struct{}),
		use:     make(chan struct{}, 1),
		holds:   map[*hold]struct{}{},
		keys:    map[int64]int{},
	}
}

// startKeeper starts the keeper goroutine (it sits out the statement
// that opened the session: the watch is paused until releaseUse).
func (s *session) startKeeper() {
	if !s.d.noKeeper.Load() {
		s.d.bg.Go(s.keep)
	}
}

// bound bounds the statement about to run on the session, through its
// socket's deadline: not the caller's context, since a statement
// interrupted half-way leaves the connection unusable and would take every
// lock of the session with it; and not a context of its own, which would
// cost allocations on every statement. unbound lifts it.
func (s *session) bound() {
	_ = s.c.pg.PgConn().Conn().SetDeadline(time.Now().Add(stmtTimeouts * s.timeout))
}

func (s *session) unbound() { _ = s.c.pg.PgConn().Conn().SetDeadline(time.Time{}) }

// acquire takes the use slot, and the socket from the watch, without a
// look (export_test's Occupy: a check stuck on a silent server);
// releaseUse gives both back.
func (s *session) acquire() {
	s.use <- struct{}{}
	s.w.Pause()
}

func (s *session) releaseUse() {
	s.w.Resume()
	<-s.use
}

// take takes the use slot, waiting for it at most until ctx ends
// (context.Background: no bound), for a statement on the session, and
// then the socket from the watch with a look on the way (sockwatch.Take).
// A Check skips the socket while a statement has it, so no statement may
// start on a connection whose server has already hung up: a holder
// resumed from a pause, whose keep-alive check is due at once, would
// otherwise have every Check say "held" until that statement failed. The
// error is ctx's, errEnded when the session had already ended, or the
// loss when the look found the server gone, in which case take ended the
// session as lost without a statement. With a nil error the caller has
// the use of s and the socket until releaseUse.
func (s *session) take(ctx context.Context) error {
	select {
	case s.use <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.ended {
		<-s.use
		return errEnded
	}
	if v, errno := s.w.Take(); v == sockwatch.VGone {
		return s.endLost(s.goneErr(errno))
	}
	return nil
}

// errEnded tells the caller of take that the session ended while it
// waited.
var errEnded = errors.New("pglock: session ended")

// noteLoss records cause as the loss, unless one is already recorded,
// and returns the recorded one.
func (s *session) noteLoss(cause error) error {
	s.loss.CompareAndSwap(nil, &cause)
	return *s.loss.Load()
}

// goneErr describes a socket that a look found closed or failing.
func (s *session) goneErr(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("pglock: the connection holding the lock failed: %w", errno)
	}
	return errors.New("pglock: the server closed the connection holding the lock (its session ended, and the lock with it)")
}

// keep watches the idle connection and pings the server every period,
// and ends the session as lost when either shows the connection gone. A
// terminated backend, a server shut down or a closed socket show on the
// socket at once; a server or network that went silent, as a ping that
// times out.
func (s *session) keep() {
	if !s.w.Watched() || s.byTimer {
		s.keepByTimer()
		return
	}
	next := time.Now().Add(s.period)
	for {
		ev, errno := s.w.Wait(next)
		switch ev {
		case sockwatch.EvStopped:
			return
		case sockwatch.EvGone:
			s.lose(s.goneErr(errno))
			return
		case sockwatch.EvDeadline:
			next = time.Now().Add(s.period)
		}
		// A keep-alive ping, or a closer look at unsolicited bytes: pgx
		// reads them (a notice, a parameter status, a TLS record) and the
		// ping fails if the session ended.
		if !s.pingOrLose() {
			return
		}
		if ev == sockwatch.EvData && s.stillData() {
			// Bytes pgx did not take (say, a background read of its own):
			// watching would wake at once again; ping on the timer until
			// the next deadline instead.
			if !s.sleepUntil(next) {
				return
			}
		}
	}
}

// stillData reports whether the socket shows bytes again right after a
// ping that should have read them.
func (s *session) stillData() bool {
	v, _ := s.w.Look()
	return v == sockwatch.VData
}

// keepByTimer is keep for a socket that cannot be watched: a ping every
// period (each after a look: see take).
func (s *session) keepByTimer() {
	for s.sleepUntil(time.Now().Add(s.period)) {
		if !s.pingOrLose() {
			return
		}
	}
}

// pingOrLose pings the server, and ends the session as lost when the
// ping fails; false when the session has ended.
func (s *session) pingOrLose() bool {
	err := s.ping()
	if err == nil {
		return true
	}
	if !errors.Is(err, errEnded) {
		s.lose(fmt.Errorf("pglock: the connection holding the lock failed its keep-alive check: %w", err))
	}
	return false
}

// sleepUntil waits until t; false when the session ended first.
func (s *session) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-s.stop:
		return false
	case <-timer.C:
		return true
	}
}

// ping sends a keep-alive ping; errEnded when the session ended before it
// (take may have ended it, having found the server gone: then there was
// nothing to ping).
func (s *session) ping() error {
	if err := s.take(context.Background()); err != nil {
		return errEnded
	}
	defer s.releaseUse()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.c.begin(false)
	return s.c.pg.PgConn().Ping(ctx)
}

// lose ends the session as lost, with every lock on it: see endLost.
func (s *session) lose(cause error) {
	cause = s.noteLoss(cause)
	s.use <- struct{}{}
	if s.ended {
		<-s.use
		return
	}
	s.endLost(cause)
}

// endLost is lose for a caller that has the use of s, which has not
// ended; it gives the use back, and returns the recorded loss. Each
// lock's loss is recorded (for Check) and its Lost closed before the
// connection is closed, because the holders must stop at once, whatever
// the close costs; closing it makes the server free the locks, if it
// still has them.
func (s *session) endLost(cause error) error {
	cause = s.noteLoss(cause)
	s.ended = true
	s.w.Stop()
	close(s.stop)
	d := s.d
	d.mu.Lock()
	d.dropSessionLocked(s)
	holds := make([]*hold, 0, len(s.holds))
	for h := range s.holds {
		delete(s.holds, h)
		d.endHoldLocked(h)
		holds = append(holds, h)
	}
	d.mu.Unlock()
	<-s.use
	for _, h := range holds {
		h.noteLoss(cause)
		h.notice.Signal()
	}
	s.c.close()
	return cause
}

// unreserve gives back a reservation that took no lock (see
// Driver.session): its keys, and its place. The caller has the use of s,
// and gives it back here.
func (s *session) unreserve(keys []int64) {
	s.d.mu.Lock()
	s.busy--
	s.d.mu.Unlock()
	s.putBack(keys, 1)
}

// putBack gives back the use of s, and with it places places and a count
// of each of keys. A session left with nothing retires instead: its
// connection goes back to the driver.
func (s *session) putBack(keys []int64, places int) {
	d := s.d
	d.mu.Lock()
	for _, k := range keys {
		s.unkeyLocked(k)
	}
	s.n -= places
	retire := s.n == 0
	if retire {
		d.dropSessionLocked(s)
	}
	d.mu.Unlock()
	if retire {
		s.retire()
		return
	}
	s.releaseUse()
}

// unkeyLocked drops one count of key k; Driver.mu is held.
func (s *session) unkeyLocked(k int64) {
	if s.keys[k]--; s.keys[k] <= 0 {
		delete(s.keys, k)
	}
}

// retire ends a session that holds nothing, whose use the caller has,
// and gives its connection back to the driver.
func (s *session) retire() {
	s.ended = true
	s.w.Stop() // paused by take: the watch never looks again
	close(s.stop)
	<-s.use
	s.d.put(s.c)
}
