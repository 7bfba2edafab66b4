package pglock

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
	"github.com/dlockgo/dlock/internal/sqlsession"
)

// Held locks live on the driver's sessions (internal/sqlsession): up to
// Options.SessionLocks of them on one of its connections, whose loss
// loses them all at once. A session's class is its locks' keep-alive
// period. Session-level advisory locks are re-entrant within a session,
// so a session is never asked for a key that it holds or is being asked
// for: the pool picks another session, or opens one.
type (
	pool    = sqlsession.Pool[*sconn, int64, lockInfo]
	session = sqlsession.Session[*sconn, int64, lockInfo]
	hold    = sqlsession.Hold[*sconn, int64, lockInfo]
)

// lockInfo is what the driver keeps of a held lock besides its key.
type lockInfo struct {
	mode driver.Mode
	// unlock is the statement that releases the key; with channel set,
	// it takes the channel as $2 and returns a second column.
	unlock  string
	channel string
}

// An sconn is the connection of a session: a pgx.Conn runs one statement
// at a time, whoever has the session's use.
type sconn struct {
	*conn
	d       *Driver
	timeout time.Duration // bounds a ping: a longer one is a lost connection
	reused  bool          // the connection was used before this session
}

// stmtTimeouts is how many ping timeouts a statement on a shared session
// may take before the session counts as lost: long enough for a server
// under load, short enough that a silent one does not keep the session.
const stmtTimeouts = 4

// newPool returns the driver's pool of sessions.
func (d *Driver) newPool() *pool {
	return sqlsession.NewPool(&d.mu, &d.closed, &d.bg, sqlsession.Config[*sconn, int64, lockInfo]{
		Locks: d.sessionLocks,
		Open: func(ctx context.Context, period time.Duration) (*sconn, error) {
			c, reused, err := d.get(ctx)
			if err != nil {
				return nil, err
			}
			return d.sconn(c, period, reused), nil
		},
		Period:  func(period time.Duration) time.Duration { return period },
		Idle:    func() bool { return len(d.idle) > 0 },
		Adopted: d.adoptedLocked,
		Ended:   func(h *hold) { d.dropKeyLocked(h.Key) },
	})
}

// sconn returns c as the connection of a session of keep-alive period.
func (d *Driver) sconn(c *conn, period time.Duration, reused bool) *sconn {
	return &sconn{conn: c, d: d, timeout: max(period, time.Second), reused: reused}
}

// bound bounds the statement about to run on the session, through its
// socket's deadline: not the caller's context, since a statement
// interrupted half-way leaves the connection unusable and would take every
// lock of the session with it; and not a context of its own, which would
// cost allocations on every statement. unbound lifts it.
func (c *sconn) bound() {
	_ = c.pg.PgConn().Conn().SetDeadline(time.Now().Add(stmtTimeouts * c.timeout))
}

func (c *sconn) unbound() { _ = c.pg.PgConn().Conn().SetDeadline(time.Time{}) }

// Keep pings the server (pgx reads whatever it sent meanwhile: a notice,
// a parameter status, an error that ends the session).
func (c *sconn) Keep() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.begin(false)
	if err := c.pg.PgConn().Ping(ctx); err != nil {
		return fmt.Errorf("pglock: the connection holding the lock failed its keep-alive check: %w", err)
	}
	return nil
}

// Gone describes a socket that a look found closed or failing.
func (c *sconn) Gone(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("pglock: the connection holding the lock failed: %w", errno)
	}
	return errors.New("pglock: the server closed the connection holding the lock (its session ended, and the lock with it)")
}

// Watch returns a watch of the connection's socket.
func (c *sconn) Watch() *sockwatch.Watch { return c.newWatch() }

// Close closes the connection of a lost session.
func (c *sconn) Close() { c.close() }

// Retire gives the connection back to the driver's idle ones.
func (c *sconn) Retire() { c.d.put(c.conn) }
