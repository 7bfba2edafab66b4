package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
	"github.com/dlockgo/dlock/internal/sqlsession"
)

// Held locks live on the driver's sessions (internal/sqlsession):
// connections checked out of the *sql.DB with up to Options.SessionLocks
// GET_LOCK locks each, all lost with the connection. A session's class is
// its wait_timeout, its locks' TTL. GET_LOCK is re-entrant within a
// session, so the pool never asks a session for a key it holds or is
// asked for. Statements are bounded by stmtBound, not a caller's context,
// whose end would make go-sql-driver close the connection and its locks.
type (
	pool    = sqlsession.Pool[*sconn, string, struct{}]
	session = sqlsession.Session[*sconn, string, struct{}]
	hold    = sqlsession.Hold[*sconn, string, struct{}]
)

// An sconn is the connection of a session.
type sconn struct {
	d       *Driver
	conn    *sql.Conn
	id      int64         // the connection's CONNECTION_ID()
	timeout time.Duration // the session's wait_timeout
	raw     net.Conn      // the socket, if known (Options.Sockets): see bound
	lastOK  time.Time     // when the last statement that succeeded was sent
	// ctx, if set, bounds statements on an acquisition's own connection.
	ctx context.Context
}

// stmtTimeouts is how many keep-alive periods (a second at least) a
// statement may take (for a loaded server, not a silent one) before its
// session counts lost.
const stmtTimeouts = 4

// restoreTimeout restores a connection's wait_timeout (a NULL would mean 1s).
const restoreTimeout = "SET SESSION wait_timeout = COALESCE(@dlock_wait_timeout, @@GLOBAL.wait_timeout), @dlock_wait_timeout = NULL"

// seconds is a wait_timeout in whole seconds, as SQL.
func seconds(timeout time.Duration) string { return strconv.FormatInt(int64(timeout/time.Second), 10) }

// saveTimeout saves the session's wait_timeout and sets timeout.
func saveTimeout(timeout time.Duration) string {
	return "SET @dlock_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = " + seconds(timeout)
}

// newPool returns the driver's pool of sessions.
func (d *Driver) newPool() *pool {
	return sqlsession.NewPool(&d.mu, &d.closed, &d.bg, sqlsession.Config[*sconn, string, struct{}]{
		Locks: d.sessionLocks,
		Open: func(ctx context.Context, timeout time.Duration) (*session, error) {
			c, err := d.db.Conn(ctx)
			if err != nil {
				return nil, fmt.Errorf("mysqllock: connection: %w", err)
			}
			return d.newSession(c, timeout), nil
		},
		Period: d.period,
	})
}

// period is the keep-alive period of sessions of wait_timeout timeout.
func (d *Driver) period(timeout time.Duration) time.Duration {
	return max(min(d.keepAlive, timeout/3), time.Millisecond)
}

// identify records the id the first statement read, and finds the socket.
func (c *sconn) identify(id int64) {
	c.id = id
	c.raw = c.d.socks.socket(id)
}

// Watch returns the watch of the connection's socket.
func (c *sconn) Watch() *sockwatch.Watch {
	return sockwatch.New(c.raw, c.d.socks != nil && c.d.socks.opaque, sessionEnded)
}

// stmtBound bounds one statement on the session.
func (c *sconn) stmtBound() time.Duration {
	return stmtTimeouts * max(c.d.period(c.timeout), time.Second)
}

// bound returns the context of a statement on the session, bounded by
// stmtBound, and the cancel function for unbound. Where the socket is
// known, the bound is its deadline: no timer, and no database/sql
// goroutine watching a context.
func (c *sconn) bound() (context.Context, context.CancelFunc) {
	if c.ctx != nil {
		return c.ctx, func() {}
	}
	if c.raw != nil {
		_ = c.raw.SetDeadline(time.Now().Add(c.stmtBound()))
		return context.Background(), nil
	}
	return context.WithTimeout(context.Background(), c.stmtBound())
}

// unbound lifts bound's bound: cancel, or the socket's deadline.
func (c *sconn) unbound(cancel context.CancelFunc) {
	if cancel != nil {
		cancel()
		return
	}
	_ = c.raw.SetDeadline(time.Time{})
}

// query runs q on the session (bounded; the caller has its use) into dest.
func (c *sconn) query(q string, dest ...any) error {
	ctx, cancel := c.bound()
	sent := time.Now()
	err := c.conn.QueryRowContext(ctx, q).Scan(dest...)
	c.unbound(cancel)
	if err == nil {
		c.lastOK = sent
	}
	return err
}

// exec runs q on the session, as query does.
func (c *sconn) exec(q string) error {
	ctx, cancel := c.bound()
	sent := time.Now()
	_, err := c.conn.ExecContext(ctx, q)
	c.unbound(cancel)
	if err == nil {
		c.lastOK = sent
	}
	return err
}

// Keep runs one keep-alive check: the connection must still be the one
// that took the locks (a proxy that reconnected it would have a new id),
// and the server must hear from it before its wait_timeout frees them:
// within nine tenths of it from the sending of the last statement that
// succeeded.
func (c *sconn) Keep() error {
	lossAt := c.lastOK.Add(c.timeout - c.timeout/10)
	if !time.Now().Before(lossAt) {
		return fmt.Errorf("mysqllock: connection %d went unchecked for longer than its wait_timeout allows (%v)", c.id, c.timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), lossAt)
	defer cancel()
	sent := time.Now()
	var id int64
	if err := c.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return fmt.Errorf("mysqllock: check on connection %d, which held the lock: %w", c.id, err)
	}
	if id != c.id {
		return fmt.Errorf("mysqllock: connection %d, which held the lock, is now connection %d (reconnected by a proxy?)", c.id, id)
	}
	c.lastOK = sent
	return nil
}

// Gone describes a socket that a look found closed or failing.
func (c *sconn) Gone(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("mysqllock: connection %d, which held the lock, failed: %w", c.id, errno)
	}
	return fmt.Errorf("mysqllock: the server closed connection %d, which held the lock (killed, restarted, or idle past wait_timeout)", c.id)
}

// Close closes the connection of a lost session.
func (c *sconn) Close() { discard(c.conn) }

// Retire gives the connection back to the pool, its wait_timeout restored
// unless the pool is exclusive (closed if that fails).
func (c *sconn) Retire() {
	if c.d.exclusive {
		_ = c.conn.Close()
		return
	}
	if err := c.exec(restoreTimeout); err != nil {
		discard(c.conn)
		return
	}
	_ = c.conn.Close()
}

// check verifies that IS_USED_LOCK of the key is the session's connection.
func (d *Driver) check(h *hold) error {
	s := h.S
	if err := takeFor(h, "the lock was lost"); err != nil {
		return err
	}
	var holder sql.NullInt64
	err := s.C.query("SELECT IS_USED_LOCK("+literal(h.Key)+")", &holder)
	switch {
	case err != nil:
		err = fmt.Errorf("mysqllock: %q: checking the lock failed, and took its connection with it: %w", h.Name, err)
		s.EndLost(err)
	case !holder.Valid:
		err = fmt.Errorf("mysqllock: %q: the server has the lock free, not held by connection %d", h.Name, s.C.id)
		h.End(err)
	case holder.Int64 != s.C.id:
		err = fmt.Errorf("mysqllock: %q: the server has the lock on connection %d, not on the holder's, %d", h.Name, holder.Int64, s.C.id)
		h.End(err)
	default:
		s.Release()
		return nil
	}
	return errNotHeld(h.Name, "the lock was lost", err)
}

// release runs RELEASE_LOCK on the lock's session.
func (d *Driver) release(h *hold) error {
	s := h.S
	if err := takeFor(h, "the lock's connection had been closed by the server"); err != nil {
		return err
	}
	var rel sql.NullInt64
	err := s.C.query("SELECT RELEASE_LOCK("+literal(h.Key)+")", &rel)
	switch {
	case err == nil && rel.Valid && rel.Int64 == 1:
		h.Released()
		return nil
	case err == nil:
		err = fmt.Errorf("mysqllock: %q: the server did not have the lock on its connection", h.Name)
		h.End(err)
		return errNotHeld(h.Name, "the lock was lost", err)
	}
	// Failed, or in an unknown state: closing it frees the session's locks.
	s.EndLost(fmt.Errorf("mysqllock: release %q failed, and took its connection with it: %w", h.Name, err))
	return errNotHeld(h.Name, "the lock's connection failed", err)
}

// takeFor takes the use of h's session; an error says why h is no longer
// held, gone saying it for a server Take found gone (ending the session).
func takeFor(h *hold, gone string) error {
	switch err := h.S.Take(context.Background()); {
	case errors.Is(err, sqlsession.ErrEnded):
		why, what := h.Why(), "the lock was lost"
		if errors.Is(why, driver.ErrReleased) {
			what = "released"
		}
		return errNotHeld(h.Name, what, why)
	case err != nil:
		return errNotHeld(h.Name, gone, err)
	}
	return nil
}

// errNotHeld wraps driver.ErrNotHeld for the lock called name.
func errNotHeld(name, why string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %q: %s", driver.ErrNotHeld, name, why)
	}
	return fmt.Errorf("%w: %q: %s: %w", driver.ErrNotHeld, name, why, cause)
}

// lookup returns the held lock of r, or nil.
func (d *Driver) lookup(r driver.Request) *hold {
	if h := d.pool.Held(r.Owner); h != nil && h.Name == r.Name {
		return h
	}
	return nil
}

// Renew implements driver.Driver. A lock lives as long as its session,
// which the driver keeps alive: Renew checks on the session that the
// server still has the lock there (IS_USED_LOCK), and returns the zero
// time. When ctx ends first it returns ctx's error, and the check goes on
// (see untilDone).
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	h := d.lookup(r)
	if h == nil {
		return time.Time{}, errNotHeld(r.Name, "not held by this owner", nil)
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, d.untilDone(ctx, func() error { return d.check(h) })
}

// Unlock implements driver.Driver: RELEASE_LOCK on the lock's session; a
// session left holding nothing goes back to the pool. A lock whose
// connection failed, or that the server no longer had, gives an error
// matching ErrNotHeld. When ctx ends first, Unlock returns ctx's error and
// the release goes on (see untilDone).
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	h := d.lookup(r)
	if h == nil {
		return errNotHeld(r.Name, "not held by this owner", nil)
	}
	d.pool.Forget(h)
	err := d.untilDone(ctx, func() error { return d.release(h) })
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("mysqllock: release %q: %w (the release goes on once the lock's connection is free)", r.Name, err)
	}
	return err
}

// untilDone returns f's error, or ctx's if it ends first: f goes on in the
// background (Close waits for it), as a cancelled statement would close
// the connection and free every lock of the session.
func (d *Driver) untilDone(ctx context.Context, f func() error) error {
	if ctx.Done() == nil { // cannot end: no goroutine needed
		return f()
	}
	done := make(chan error, 1)
	d.bg.Go(func() { done <- f() })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // done as well
			return err
		default:
			return ctx.Err()
		}
	}
}

// sessionEnded judges, for a lock's socket watch (sockwatch.New), a
// packet that came while no statement ran: an error packet (3 bytes of
// length, a sequence number, 0xff) means the server is closing the
// connection (KILL, a shutdown, wait_timeout, where MySQL 8 says why).
// Nothing else comes unprompted: other bytes, or any under TLS or
// compression (opaque), the keeper reads with a check at once.
func sessionEnded(frame []byte) bool { return len(frame) >= 5 && frame[4] == 0xff }
