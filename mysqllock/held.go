package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// maxSessionTimeout is the largest wait_timeout MySQL and MariaDB accept.
const maxSessionTimeout = 31536000 * time.Second

// restoreTimeout gives a connection back its own wait_timeout before it
// returns to the pool. (The server would take a NULL for its minimum, 1s.)
const restoreTimeout = "SET SESSION wait_timeout = COALESCE(@dlock_wait_timeout, @@GLOBAL.wait_timeout), @dlock_wait_timeout = NULL"

// lock is one acquisition: a connection of its own, checked out of the
// pool before GET_LOCK and given back only after RELEASE_LOCK.
type lock struct {
	d           *Driver
	name, owner string
	key         string // the server-side name
	conn        *sql.Conn
	id          int64 // the connection's CONNECTION_ID()
	token       uint64
	timeout     time.Duration // the session wait_timeout set on conn
	period      time.Duration // between keep-alive checks
	since       time.Time     // when the last statement of the acquisition was sent

	lost     chan struct{}   // closed when the lock is lost
	check    chan chan error // Refresh asks the keep-alive loop for a check
	stop     chan struct{}   // closed to end the keep-alive loop
	stopOnce sync.Once
	done     chan struct{} // closed when the keep-alive loop has ended

	// w watches the socket while no statement runs; the watch goroutine
	// asks the keep-alive loop for a check at once through closer when
	// the socket shows bytes it cannot judge, and waits on checked.
	w       *sockwatch.Watch
	closer  chan struct{}
	checked chan struct{}
	// loss is why the lock was lost (or errReleasedCheck), set once before
	// lost closes: what Check returns from then on.
	loss atomic.Pointer[error]

	mu    sync.Mutex
	err   error // why the lock was lost
	ended bool  // Unlock has begun releasing it: lose must not touch conn
}

func newLock(d *Driver, r driver.Request, c *sql.Conn) *lock {
	timeout := sessionTimeout(r.TTL)
	return &lock{
		d:       d,
		name:    r.Name,
		owner:   r.Owner,
		key:     d.LockName(r.Name),
		conn:    c,
		timeout: timeout,
		period:  max(min(d.keepAlive, timeout/3), time.Millisecond),
		lost:    make(chan struct{}),
		closer:  make(chan struct{}, 1),
		checked: make(chan struct{}, 1),
		check:   make(chan chan error),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// sessionTimeout is the wait_timeout for a lock with the given TTL: the TTL
// rounded up to whole seconds, within the server's bounds.
func sessionTimeout(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1).Truncate(time.Second)
	return min(max(s, time.Second), maxSessionTimeout)
}

// saveTimeout saves the session's wait_timeout and sets the lock's.
func (l *lock) saveTimeout() string {
	return "SET @dlock_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = " + l.seconds()
}

// seconds is the lock's wait_timeout, in seconds.
func (l *lock) seconds() string { return strconv.FormatInt(int64(l.timeout/time.Second), 10) }

// giveBack restores the connection's wait_timeout (unless the pool is the
// driver's alone) and returns it to the pool; a connection that cannot be
// restored is discarded.
func (l *lock) giveBack(ctx context.Context) {
	if l.d.exclusive {
		_ = l.conn.Close()
		return
	}
	if _, err := l.conn.ExecContext(ctx, restoreTimeout); err != nil {
		discard(l.conn)
		return
	}
	_ = l.conn.Close()
}

// abandon gives up an acquisition that did not complete: it releases the
// lock if held is set, and discards the connection either way (it may
// have been sent a KILL QUERY, or be in an unknown state).
func (l *lock) abandon(held bool) {
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		var rel sql.NullInt64
		_ = l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+literal(l.key)+")").Scan(&rel)
		cancel()
	}
	discard(l.conn)
}

// keepAlive checks, every period, that the server still has the lock on
// the lock's connection, and that the connection never stays silent for
// as long as its wait_timeout: the server would close it and free the
// lock. A check is sent, and must be answered, before the wait_timeout
// counted from the sending of the last successful one, less a tenth of
// it; otherwise, or when a check fails, the lock is lost.
func (l *lock) keepAlive() {
	defer close(l.done)
	q := "SELECT IS_USED_LOCK(" + literal(l.key) + ")"
	lastOK := l.since
	t := time.NewTimer(l.period)
	defer t.Stop()
	for {
		var reply chan error
		closer := false
		select {
		case <-l.stop:
			return
		case <-l.lost: // the watch found the connection gone
			return
		case <-t.C:
		case reply = <-l.check:
		case <-l.closer:
			closer = true
		}
		if f := l.d.freeze.Load(); f != nil {
			select {
			case <-*f:
			case <-l.stop:
				return
			}
		}
		sent := time.Now()
		err := l.takeAndVerify(q, lastOK.Add(l.timeout-l.timeout/10))
		if reply != nil {
			reply <- err
		}
		if closer {
			l.checked <- struct{}{} // the watch may look again
		}
		if err != nil {
			l.lose(err)
			return
		}
		lastOK = sent
		t.Reset(l.period)
	}
}

// takeAndVerify takes the socket from the watch, looking at it on the way
// (sockwatch.Take), and runs the check (verify) only when the look did
// not find the server gone. A Check skips the socket while a statement
// has it, so a check sent to a server that had already hung up (a holder
// resumed from a pause, its check due at once) would have every Check say
// "held" until the statement failed; a look that finds the server gone
// instead records the loss before returning it, so that Check reports it
// from then on, and the connection gets no statement. The socket is the
// watch's again when it returns, unless the lock is lost.
func (l *lock) takeAndVerify(q string, lossAt time.Time) error {
	if v, errno := l.w.Take(); v == sockwatch.VGone {
		return l.noteLoss(l.goneErr(errno))
	}
	err := l.verify(q, lossAt)
	l.w.Resume()
	return err
}

// verify runs one check, which must be answered before lossAt.
func (l *lock) verify(q string, lossAt time.Time) error {
	if !time.Now().Before(lossAt) {
		return fmt.Errorf("the connection went unchecked for longer than its wait_timeout allows (%v)", l.timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), lossAt)
	defer cancel()
	var holder sql.NullInt64
	if err := l.conn.QueryRowContext(ctx, q).Scan(&holder); err != nil {
		return fmt.Errorf("check on the lock's connection %d: %w", l.id, err)
	}
	if !holder.Valid {
		return fmt.Errorf("the server has the lock free, not held by connection %d", l.id)
	}
	if holder.Int64 != l.id {
		return fmt.Errorf("the server has the lock on connection %d, not on the holder's, %d", holder.Int64, l.id)
	}
	return nil
}

// lose ends the lock as lost, once, unless Unlock has begun: it records
// the loss (for Check), stops the watch, closes the Lost channel, then the
// connection, so that the server frees the lock if it still had it.
func (l *lock) lose(cause error) {
	cause = l.noteLoss(cause)
	l.mu.Lock()
	if l.err != nil || l.ended {
		l.mu.Unlock()
		return
	}
	l.err = cause
	l.mu.Unlock()
	l.d.forget(l)
	l.w.Stop()
	close(l.lost)
	discard(l.conn)
}

// noteLoss records cause as the loss, unless one is already recorded,
// and returns the recorded one.
func (l *lock) noteLoss(cause error) error {
	l.loss.CompareAndSwap(nil, &cause)
	return *l.loss.Load()
}

// errReleasedCheck is what Check says once Unlock has begun. dlock does
// not ask then; it is an error so that a released lock never looks held.
var errReleasedCheck = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrReleased)

// Check is the lock's Grant.Check: the loss, once known; otherwise one
// non-blocking look at the idle connection's socket (none while a
// statement runs on it: the statement finds out). A look that finds the
// server gone ends the lock as lost, from a goroutine of its own (closing
// the connection may block), after recording the loss so that this and
// every later Check report it. Nothing allocates while it returns nil.
func (l *lock) Check(time.Time) error {
	if p := l.loss.Load(); p != nil {
		return *p
	}
	v, errno := l.w.Look()
	if v != sockwatch.VGone {
		return nil
	}
	err := l.noteLoss(l.goneErr(errno))
	go l.lose(err)
	return err
}

// goneErr describes a socket that a look found closed or failing.
func (l *lock) goneErr(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("mysqllock: %q: connection %d, which held the lock, failed: %w", l.name, l.id, errno)
	}
	return fmt.Errorf("mysqllock: %q: the server closed connection %d, which held the lock (killed, restarted, or idle past wait_timeout)", l.name, l.id)
}

// watch is the watch goroutine: it waits for the idle socket to speak,
// ends the lock as lost when the server hung up, and otherwise has the
// keep-alive loop check the lock at once (which reads what came).
func (l *lock) watch() {
	for {
		ev, errno := l.w.Wait(time.Time{})
		switch ev {
		case sockwatch.EvStopped:
			return
		case sockwatch.EvGone:
			l.lose(l.goneErr(errno))
			return
		case sockwatch.EvDeadline: // no deadline is set: not reached
			continue
		}
		select {
		case l.closer <- struct{}{}:
		default: // a check is already asked for
		}
		// Until the check has read the bytes, the socket stays readable:
		// watching now would wake at once.
		select {
		case <-l.checked:
		case <-l.done:
			return
		}
	}
}

// cause returns why the lock was lost, or nil.
func (l *lock) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// stopKeepAlive ends the keep-alive loop and waits for it.
func (l *lock) stopKeepAlive() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
}

// forget removes l from the held locks.
func (d *Driver) forget(l *lock) {
	d.mu.Lock()
	if d.held[l.owner] == l {
		delete(d.held, l.owner)
	}
	d.mu.Unlock()
}

// lookup returns the held lock of r, or nil.
func (d *Driver) lookup(r driver.Request) *lock {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l := d.held[r.Owner]; l != nil && l.name == r.Name {
		return l
	}
	return nil
}

// Refresh implements driver.Driver. A lock needs no renewal: it lives as
// long as its connection, which the driver keeps alive. Refresh checks at
// once, on that connection, that the server still has the lock, and
// returns the zero time. When ctx ends first it returns ctx's error, and
// the check goes on: a cancelled statement would close the connection,
// and free the lock.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	l := d.lookup(r)
	if l == nil {
		return time.Time{}, errNotHeld(r.Name, "not held by this owner", nil)
	}
	reply := make(chan error, 1)
	select {
	case l.check <- reply:
	case <-l.done:
		return time.Time{}, errNotHeld(r.Name, "the lock was lost", l.cause())
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	select {
	case err := <-reply:
		if err != nil {
			return time.Time{}, errNotHeld(r.Name, "the lock was lost", err)
		}
		return time.Time{}, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// Unlock implements driver.Driver: RELEASE_LOCK on the lock's connection,
// which then goes back to the pool. A lock whose connection failed, or
// that the server no longer had, gives an error matching ErrNotHeld. When
// ctx ends during the release, the connection is closed instead, which
// frees the lock as soon as the server notices; the error says so.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	l := d.lookup(r)
	if l == nil {
		return errNotHeld(r.Name, "not held by this owner", nil)
	}
	d.forget(l)
	l.stopKeepAlive()
	l.mu.Lock()
	cause := l.err
	l.ended = cause == nil
	l.mu.Unlock()
	if cause != nil {
		return errNotHeld(r.Name, "the lock was lost", cause)
	}
	l.loss.CompareAndSwap(nil, &errReleasedCheck)
	// The statements below, and the pool after them, have the socket; a
	// connection the server has closed gets none (see takeAndVerify).
	v, errno := l.w.Take()
	l.w.Stop()
	if v == sockwatch.VGone {
		discard(l.conn)
		return errNotHeld(r.Name, "the lock's connection had been closed by the server", l.goneErr(errno))
	}
	var rel sql.NullInt64
	err := l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK("+literal(l.key)+")").Scan(&rel)
	switch {
	case err != nil && ctx.Err() != nil:
		discard(l.conn)
		return fmt.Errorf("mysqllock: release %q: %w (the connection was closed: the server frees the lock when it notices)", r.Name, err)
	case err != nil:
		discard(l.conn)
		return errNotHeld(r.Name, "the lock's connection failed", err)
	case !rel.Valid || rel.Int64 != 1:
		discard(l.conn)
		return errNotHeld(r.Name, "the server did not have the lock on its connection", nil)
	}
	l.giveBack(ctx)
	return nil
}
