package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// A session is one of the driver's connections while it holds locks: up
// to Options.SessionLocks GET_LOCK locks, each a hold. All its locks share
// its wait_timeout, the TTL they were taken with (sessions are per
// timeout), and one keeper goroutine that watches its socket and checks
// it every keep-alive period: when the connection is lost, every lock on
// it is lost at once.
//
// A connection runs one statement at a time, so whoever runs one (an
// acquisition, a release, a check, the keeper) first takes the session's
// use slot, waiting for it at most until its context ends. The statements
// themselves are not cancelled with a caller's context: go-sql-driver
// closes a connection whose statement's context ends, which would end
// every lock of the session; they are bounded by stmtBound instead.
//
// GET_LOCK is re-entrant within a session, so a session is never asked
// for a key that it holds or is being asked for (keys): the driver picks
// another session, or opens one.
type session struct {
	d       *Driver
	conn    *sql.Conn
	id      int64         // the connection's CONNECTION_ID()
	timeout time.Duration // the session's wait_timeout
	period  time.Duration // between keep-alive checks
	w       *sockwatch.Watch
	// raw is the connection's socket, when the driver knows it (see
	// Options.Sockets): statements are then bounded by its deadline, and
	// unbound lifts that.
	raw     net.Conn
	unbound context.CancelFunc
	stop    chan struct{} // closed when the session ends: stops the keeper
	// loss is why the session was lost, set (once) before its locks' Lost
	// close and before the connection is closed.
	loss atomic.Pointer[error]

	// use is a one-slot semaphore: whoever fills it may use conn, ended
	// and lastOK. Unlike a mutex, waiting for it can end with a context.
	use    chan struct{}
	ended  bool      // retired (its connection went back to the pool) or lost
	lastOK time.Time // when the last statement that succeeded was sent

	// Guarded by Driver.mu.
	holds map[*hold]struct{}
	keys  map[string]struct{} // keys held or being asked for on the session
	n     int                 // holds and acquisitions under way
	gone  bool                // no longer among Driver.sessions
}

// stmtTimeouts is how many keep-alive periods (at least a second each) a
// statement on a session may take before the session counts as lost:
// long enough for a server under load, short enough that a silent one
// does not keep the session.
const stmtTimeouts = 4

// newSession returns the session of c, whose wait_timeout is timeout; its
// id and watch are set once the first statement has read CONNECTION_ID().
func (d *Driver) newSession(c *sql.Conn, timeout time.Duration) *session {
	return &session{
		d:       d,
		conn:    c,
		timeout: timeout,
		period:  max(min(d.keepAlive, timeout/3), time.Millisecond),
		stop:    make(chan struct{}),
		use:     make(chan struct{}, 1),
		holds:   map[*hold]struct{}{},
		keys:    map[string]struct{}{},
	}
}

// identify records the connection's id, learnt from the session's first
// statement, and makes the watch of its socket (busy until Start).
func (s *session) identify(id int64) {
	s.id = id
	s.raw = s.d.socks.socket(id)
	if s.raw != nil {
		s.unbound = func() { _ = s.raw.SetDeadline(time.Time{}) }
	}
	s.w = sockwatch.New(s.raw, s.d.socks != nil && s.d.socks.opaque, sessionEnded)
}

// stmtBound bounds one statement on the session.
func (s *session) stmtBound() time.Duration { return stmtTimeouts * max(s.period, time.Second) }

// bound returns the context of a statement on the session, bounded by
// stmtBound rather than by any caller's context (see session), and what
// lifts the bound once the statement is done. Where the driver knows the
// socket, the bound is its deadline: no timer, and no goroutine of
// database/sql's watching a context, per statement.
func (s *session) bound() (context.Context, context.CancelFunc) {
	if s.raw != nil {
		_ = s.raw.SetDeadline(time.Now().Add(s.stmtBound()))
		return context.Background(), s.unbound
	}
	return context.WithTimeout(context.Background(), s.stmtBound())
}

// query runs q on the session, bounded (see bound), and scans its one
// row into dest. The caller has the use of s.
func (s *session) query(q string, dest ...any) error {
	ctx, cancel := s.bound()
	defer cancel()
	sent := time.Now()
	err := s.conn.QueryRowContext(ctx, q).Scan(dest...)
	if err == nil {
		s.lastOK = sent
	}
	return err
}

// take takes the use slot, waiting for it at most until ctx ends
// (context.Background: no bound), and then the socket from the watch
// with a look on the way (sockwatch.Take): no statement starts on a connection whose server has
// already hung up, or a Check would say "held" until that statement
// failed. The error is ctx's, errEnded when the session had ended, or the
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

// releaseUse gives the socket back to the watch, and the use slot back.
func (s *session) releaseUse() {
	s.w.Resume()
	<-s.use
}

// errEnded tells the caller of take that the session ended while it
// waited.
var errEnded = errors.New("mysqllock: session ended")

// noteLoss records cause as the loss, unless one is already recorded,
// and returns the recorded one.
func (s *session) noteLoss(cause error) error {
	s.loss.CompareAndSwap(nil, &cause)
	return *s.loss.Load()
}

// goneErr describes a socket that a look found closed or failing.
func (s *session) goneErr(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("mysqllock: connection %d, which held the lock, failed: %w", s.id, errno)
	}
	return fmt.Errorf("mysqllock: the server closed connection %d, which held the lock (killed, restarted, or idle past wait_timeout)", s.id)
}

// start lets the watch look, and starts the keeper; the caller has the
// use of s (the watch waits for releaseUse).
func (s *session) start() {
	s.w.Start()
	s.w.Pause()
	s.d.keepers.Add(1)
	go s.keep()
}

// keep is the keeper goroutine. While no statement runs, it waits for the
// socket to speak (ending the session as lost when the server hung up)
// or for the next keep-alive period, and then checks the session: the
// connection must still be the one that took the locks (a proxy that
// reconnected it would have a new id), and the server must hear from it
// before its wait_timeout, or the server would close it and free the
// locks. A check is sent, and must be answered, before the wait_timeout
// counted from the sending of the last statement that succeeded, less a
// tenth of it; otherwise, or when a check fails, the session is lost.
// Where the socket is not watched, the checks run on the timer alone.
func (s *session) keep() {
	defer s.d.keepers.Done()
	watched := s.w.Watched() && !s.d.noWatch.Load()
	next := time.Now().Add(s.period)
	for {
		ev := sockwatch.EvDeadline
		if watched {
			var errno syscall.Errno
			ev, errno = s.w.Wait(next)
			switch ev {
			case sockwatch.EvStopped:
				return
			case sockwatch.EvGone:
				s.lose(s.goneErr(errno))
				return
			}
		} else if !s.sleepUntil(next) {
			return
		}
		if ev == sockwatch.EvDeadline {
			next = time.Now().Add(s.period)
		}
		if f := s.d.freeze.Load(); f != nil {
			select {
			case <-*f:
			case <-s.stop:
				return
			}
		}
		// A check, or a closer look at unsolicited bytes, which the
		// check reads (an error packet fails it).
		if !s.checkOrLose() {
			return
		}
		if ev == sockwatch.EvData && s.stillData() {
			// Bytes the check did not take: watching would wake at once
			// again; wait for the next period instead.
			if !s.sleepUntil(next) {
				return
			}
		}
	}
}

// stillData reports whether the socket shows bytes again right after a
// check that should have read them.
func (s *session) stillData() bool {
	v, _ := s.w.Look()
	return v == sockwatch.VData
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

// checkOrLose runs a keep-alive check, and ends the session as lost when
// it fails; false when the session has ended.
func (s *session) checkOrLose() bool {
	if err := s.take(context.Background()); err != nil {
		return false // ended, or take found the server gone and ended it
	}
	err := s.verify()
	if err != nil {
		s.endLost(err)
		return false
	}
	s.releaseUse()
	return true
}

// verify runs one keep-alive check; the caller has the use of s.
func (s *session) verify() error {
	lossAt := s.lastOK.Add(s.timeout - s.timeout/10)
	if !time.Now().Before(lossAt) {
		return fmt.Errorf("mysqllock: connection %d went unchecked for longer than its wait_timeout allows (%v)", s.id, s.timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), lossAt)
	defer cancel()
	sent := time.Now()
	var id int64
	if err := s.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return fmt.Errorf("mysqllock: check on connection %d, which held the lock: %w", s.id, err)
	}
	if id != s.id {
		return fmt.Errorf("mysqllock: connection %d, which held the lock, is now connection %d (reconnected by a proxy?)", s.id, id)
	}
	s.lastOK = sent
	return nil
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
	discard(s.conn)
	return cause
}

// putBack gives back the use of s, with one place and key (if not
// empty). A session left with nothing retires instead: its connection
// goes back to the pool.
func (s *session) putBack(key string) {
	d := s.d
	d.mu.Lock()
	if key != "" {
		delete(s.keys, key)
	}
	s.n--
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

// retire ends a session that holds nothing, whose use the caller has, and
// gives its connection back to the pool, with its own wait_timeout
// restored unless the pool is the driver's alone; a connection that
// cannot be restored is closed instead.
func (s *session) retire() {
	s.ended = true
	if s.w != nil {
		s.w.Stop() // paused by take: the watch never looks again
	}
	close(s.stop)
	<-s.use
	if s.d.exclusive {
		_ = s.conn.Close()
		return
	}
	ctx, cancel := s.bound()
	_, err := s.conn.ExecContext(ctx, restoreTimeout)
	cancel()
	if err != nil {
		discard(s.conn)
		return
	}
	_ = s.conn.Close()
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
// acquisitions wait for one another's statements, when every session with
// room is running one: concurrent acquisitions then run side by side on
// as many connections.
const busySessions = 16

// pickLocked returns a session of wait_timeout timeout with room that is
// not asked for key, or nil to open one: one nothing is using; else a new
// one, while fewer than busySessions are open; else the one fewest
// acquisitions are using. Driver.mu is held.
func (d *Driver) pickLocked(key string, timeout time.Duration) *session {
	var spare *session
	for _, s := range d.sessions {
		if s.n >= d.sessionLocks || s.timeout != timeout {
			continue
		}
		if _, asked := s.keys[key]; asked {
			continue
		}
		if len(s.use) == 0 { // no statement runs on it, at a glance
			return s
		}
		if spare == nil || s.n-len(s.holds) < spare.n-len(spare.holds) {
			spare = s
		}
	}
	if len(d.sessions) >= busySessions {
		return spare
	}
	return nil
}

// session returns a session of wait_timeout timeout on which to ask for
// key, whose use the caller then has, with key and a place reserved on
// it; fresh when it was opened for this (on a connection from the pool,
// without its id yet: see Driver.tryOn). ctx bounds the wait for a
// session and the checkout of a connection.
func (d *Driver) session(ctx context.Context, key string, timeout time.Duration) (s *session, fresh bool, err error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, false, driver.ErrClosed
		}
		s = d.pickLocked(key, timeout)
		if s != nil {
			s.keys[key] = struct{}{}
			s.n++
		}
		d.mu.Unlock()
		if s == nil {
			break
		}
		switch err := s.take(ctx); {
		case err == nil:
			return s, false, nil
		case ctx.Err() != nil:
			s.unreserve(key)
			return nil, false, ctx.Err()
		}
		// The session ended meanwhile: pick again.
		s.unreserve(key)
	}
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("mysqllock: connection: %w", err)
	}
	s = d.newSession(c, timeout)
	s.keys[key] = struct{}{}
	s.n = 1
	s.use <- struct{}{}
	return s, true, nil
}

// unreserve gives back a reservation of key on s that took no lock, for
// a caller that does not have the use of s.
func (s *session) unreserve(key string) {
	d := s.d
	d.mu.Lock()
	delete(s.keys, key)
	s.n--
	retire := s.n == 0 && !s.gone
	if retire {
		d.dropSessionLocked(s)
	}
	d.mu.Unlock()
	if retire {
		// Nothing else uses it: retire it, unless it ended meanwhile.
		s.use <- struct{}{}
		if s.ended {
			<-s.use
			return
		}
		s.w.Pause()
		s.retire()
	}
}
