package pglock

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
	"github.com/dlockgo/dlock/internal/sqlsession"
)

// Held locks live on the driver's sessions (internal/sqlsession), up to
// Options.SessionLocks on a connection, all lost with it. A session's
// class is its locks' keep-alive period. Session-level advisory locks are
// re-entrant within a session, so the pool never asks a session for a key
// it holds or is asked for.
type (
	pool    = sqlsession.Pool[*conn, int64, lockInfo]
	session = sqlsession.Session[*conn, int64, lockInfo]
	hold    = sqlsession.Hold[*conn, int64, lockInfo]
)

// lockInfo is what the driver keeps of a held lock besides its key.
type lockInfo struct {
	mode driver.Mode
	// unlock releases the key; if channel is set, it takes it as $2 and
	// returns a second column.
	unlock  string
	channel string
}

// stmtTimeouts is how many ping timeouts a statement on a shared session
// may take (for a loaded server, not a silent one) before it counts lost.
const stmtTimeouts = 4

// newPool returns the driver's pool of sessions.
func (d *Driver) newPool() *pool {
	return sqlsession.NewPool(&d.mu, &d.closed, &d.bg, sqlsession.Config[*conn, int64, lockInfo]{
		Locks: d.sessionLocks,
		Open: func(ctx context.Context, period time.Duration) (*session, error) {
			c, reused, err := d.get(ctx)
			if err != nil {
				return nil, err
			}
			c.session(period, reused)
			return d.pool.Init(new(session), c, period), nil
		},
		Period:  func(period time.Duration) time.Duration { return period },
		Idle:    func() bool { return len(d.idle) > 0 },
		Adopted: d.adoptedLocked,
		Ended:   func(h *hold) { d.dropKeyLocked(h.Key) },
	})
}

// session makes c a session's connection; reused: it was used before.
func (c *conn) session(period time.Duration, reused bool) {
	c.timeout, c.reused = max(period, time.Second), reused
}

// bound bounds the statement about to run on the session by its socket's
// deadline: not the caller's context, as an interrupted statement costs
// the connection and every lock of the session; nor a context of its own,
// which allocates on every statement. unbound lifts it.
func (c *conn) bound() {
	_ = c.pg.PgConn().Conn().SetDeadline(time.Now().Add(stmtTimeouts * c.timeout))
}

func (c *conn) unbound() { _ = c.pg.PgConn().Conn().SetDeadline(time.Time{}) }

// Keep pings the server (pgx reads whatever it sent meanwhile: a notice,
// a parameter status, an error that ends the session).
func (c *conn) Keep() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.begin(false)
	if err := c.pg.PgConn().Ping(ctx); err != nil {
		return fmt.Errorf("pglock: the connection holding the lock failed its keep-alive check: %w", err)
	}
	return nil
}

// Gone describes a socket that a look found closed or failing.
func (c *conn) Gone(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("pglock: the connection holding the lock failed: %w", errno)
	}
	return errors.New("pglock: the server closed the connection holding the lock (its session ended, and the lock with it)")
}

// Watch returns a watch of the connection's socket.
func (c *conn) Watch() *sockwatch.Watch { return newSockWatch(c.raw, c.pg.PgConn().Conn()) }

// Close closes the connection of a lost session.
func (c *conn) Close() { c.close() }

// Retire gives the connection back to the driver's idle ones.
func (c *conn) Retire() { c.d.put(c) }

// Unlock releases the lock with pg_advisory_unlock on its session; a
// session left holding nothing goes back to the idle connections. The
// error matches ErrNotHeld when r.Owner does not hold the lock through
// this driver, or its session has ended. If ctx ends first, the unlock
// still runs once the session is free (ctx bounds only the wait for the
// session), and Close waits for it.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	h, err := d.lookup(r)
	if err != nil {
		return err
	}
	d.pool.Forget(h)
	return d.release(ctx, h)
}

// Renew checks in pg_locks that the lock's session still holds it, and
// returns the zero time: a session lock needs no renewal. When it does
// not, or the check fails (which costs the connection and the session's
// locks), the lock is lost and the error matches ErrNotHeld. A ctx done
// before the check starts only returns its error.
func (d *Driver) Renew(ctx context.Context, r driver.Request) (time.Time, error) {
	h, err := d.lookup(r)
	if err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, d.check(ctx, h)
}

// lookup returns the held lock of r, or an error matching ErrNotHeld.
func (d *Driver) lookup(r driver.Request) (*hold, error) {
	if h := d.pool.Held(r.Owner); h != nil && h.Name == r.Name && h.X.mode == r.Mode {
		return h, nil
	}
	return nil, fmt.Errorf("%w: %q is not held by owner %s through this driver", driver.ErrNotHeld, r.Name, r.Owner)
}

// check verifies, on the lock's session, that it still holds the lock.
func (d *Driver) check(ctx context.Context, h *hold) error {
	s := h.S
	if err := take(ctx, h); err != nil {
		return err
	}
	s.C.begin(false)
	var held bool
	s.C.bound()
	err := s.C.pg.QueryRow(context.Background(), d.st.held, h.Key).Scan(&held)
	s.C.unbound()
	switch {
	case err != nil:
		err = fmt.Errorf("pglock: %q: checking the lock failed, and took its connection with it: %w", h.Name, err)
		s.EndLost(err)
	case !held:
		err = fmt.Errorf("pglock: %q: the session no longer holds the lock", h.Name)
		h.End(err)
	case s.Ended(): // the server's FATAL came with the reply
		err = s.EndLost(s.C.Gone(0))
	default:
		s.Release()
		return nil
	}
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
}

// release unlocks on the lock's session, once it is free even if ctx
// ends first (a keep-alive check stuck on a silent server).
func (d *Driver) release(ctx context.Context, h *hold) error {
	err := take(ctx, h)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		d.bg.Go(func() { // Close waits for it
			if h.S.Take(context.Background()) == nil {
				_ = unlockTaken(h)
			}
		})
		return fmt.Errorf("pglock: unlock %q: %w (the lock will be released once its connection is free, or freed with the connection)", h.Name, err)
	}
	if err != nil {
		return err
	}
	return unlockTaken(h)
}

// take takes h's session's use; an error is ctx's, or why h is not held.
func take(ctx context.Context, h *hold) error {
	switch err := h.S.Take(ctx); {
	case err == nil:
		return nil
	case errors.Is(err, sqlsession.ErrEnded):
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.Name, h.Why())
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	default: // Take found the server gone: the session, and its locks, ended
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.Name, err)
	}
}

// unlockTaken runs the unlock statement, giving back the session's use.
func unlockTaken(h *hold) error {
	s := h.S
	c := s.C
	c.begin(false)
	var ok bool
	var err error
	ctx := context.Background() // bounded by c.bound
	c.bound()
	if h.X.channel != "" {
		err = c.pg.QueryRow(ctx, h.X.unlock, h.Key, h.X.channel).Scan(&ok, nil)
	} else {
		err = c.pg.QueryRow(ctx, h.X.unlock, h.Key).Scan(&ok)
	}
	c.unbound()
	switch {
	case err == nil && ok:
		h.Released()
		return nil
	case err == nil:
		err = fmt.Errorf("pglock: %q: the server says the session did not hold it", h.Name)
		h.End(err)
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
	case c.pg.IsClosed() && !pgconn.Timeout(err):
		// The session had ended (terminated, restart), and its locks.
		s.EndLost(fmt.Errorf("pglock: the connection holding the lock failed: %w", err))
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.Name, err)
	}
	s.EndLost(fmt.Errorf("pglock: unlock %q failed, and took its connection with it: %w", h.Name, err))
	return fmt.Errorf("pglock: unlock %q: %w (the connection was closed instead, which frees the lock once the server reads the close)", h.Name, err)
}
