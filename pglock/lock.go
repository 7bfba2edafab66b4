package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock/driver"
)

// TryLock takes the lock with pg_try_advisory_lock on a connection of its
// own, advancing the name's token in the same statement: one round trip
// when an idle connection is at hand. When another session holds the lock
// it returns a *driver.HeldError (Remaining is 0: a session lock has no
// expiry).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock takes the lock with pg_advisory_lock, which waits on the server, on
// a connection of its own: one round trip when the lock is free. When ctx
// ends first, the driver asks the server to cancel the wait, so that
// nothing stays queued, closes that connection and returns ctx's error.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, true)
}

func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	k := Key(d.st.table, r.Name)
	for retried := false; ; retried = true {
		c, reused, err := d.get(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		token, err := d.take(ctx, c, k, r.Name, wait)
		switch {
		case err == nil && !c.cancelSent():
			return d.grant(c, r, k, token)
		case errors.Is(err, pgx.ErrNoRows) && !c.cancelSent():
			d.put(c)
			return driver.Grant{}, &driver.HeldError{Name: r.Name}
		}
		// The connection's state is unknown, or a cancel request may still
		// be on its way to it: close it, which frees anything its session
		// took.
		dead := c.pg.IsClosed() // pgx closed it: the session had failed
		c.close()
		switch {
		case d.isClosed():
			return driver.Grant{}, errClosed
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err()
		case pgCode(err) == codeLockNotAvailable, wait && pgCode(err) == codeQueryCanceled:
			// The session's lock_timeout or statement_timeout (or an
			// operator's pg_cancel_backend) ended the wait.
			return driver.Grant{}, &driver.HeldError{Name: r.Name}
		case reused && !retried && dead:
			// An idle connection that had died (server restart, idle
			// timeout): try once more on a new one.
			continue
		}
		return driver.Grant{}, fmt.Errorf("pglock: lock %q: %w", r.Name, hint(err, d.st.table))
	}
}

// take runs the statement that takes key k and advances name's token.
// pgx.ErrNoRows means that the lock was not taken.
func (d *Driver) take(ctx context.Context, c *conn, k int64, name string, wait bool) (int64, error) {
	sql := d.st.tryLock
	if wait {
		sql = d.st.lock
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return 0, errClosed
		}
		d.waiting[c] = cancel // Close cancels the wait
		d.mu.Unlock()
		defer func() {
			d.mu.Lock()
			delete(d.waiting, c)
			d.mu.Unlock()
		}()
	}
	c.begin(wait)
	var token int64
	err := c.pg.QueryRow(ctx, sql, k, name).Scan(&token)
	return token, err
}

// grant makes c the holder of the lock just taken.
func (d *Driver) grant(c *conn, r driver.Request, k int64, token int64) (driver.Grant, error) {
	period := d.keepalive
	if r.TTL > 0 {
		period = max(MinKeepalive, min(period, r.TTL/3))
	}
	h := newHold(d, c, r.Name, r.Owner, k, period)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		c.close()
		return driver.Grant{}, errClosed
	}
	d.held[r.Owner] = h
	d.mu.Unlock()
	go h.keep()
	return driver.Grant{Token: uint64(token), Lost: h.lost}, nil
}

// Unlock releases the lock with pg_advisory_unlock on the connection that
// holds it, and makes the connection idle again. It returns an error
// matching ErrNotHeld when r.Owner does not hold the lock through this
// driver, or the lock's session has ended. When ctx ends during the
// release, the connection is closed instead, which frees the lock as soon
// as the server reads the close.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	h := d.lookup(r)
	if h == nil {
		return fmt.Errorf("%w: %q is not held by owner %s through this driver", driver.ErrNotHeld, r.Name, r.Owner)
	}
	return h.release(ctx)
}

// Refresh checks, on the lock's connection, that its session still holds
// the lock (in pg_locks), and returns the zero time: a session lock needs
// no renewal. When the session no longer holds it, or the check fails
// (which leaves the connection unusable, so that the lock goes with it),
// the lock is lost and Refresh returns an error matching ErrNotHeld. A ctx
// that is done before the check starts only returns its error.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	h := d.lookup(r)
	if h == nil {
		return time.Time{}, fmt.Errorf("%w: %q is not held by owner %s through this driver", driver.ErrNotHeld, r.Name, r.Owner)
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, h.check(ctx)
}

// lookup returns the held lock of r, or nil.
func (d *Driver) lookup(r driver.Request) *hold {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.held[r.Owner]; h != nil && h.name == r.Name {
		return h
	}
	return nil
}

// forget drops h from the held locks.
func (d *Driver) forget(h *hold) {
	d.mu.Lock()
	if d.held[h.owner] == h {
		delete(d.held, h.owner)
	}
	d.mu.Unlock()
}
