package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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
	if err := checkMode(r); err != nil {
		return driver.Grant{}, err
	}
	if r.Mode == driver.Permit && wait {
		return d.lockPermit(ctx, r)
	}
	return d.run(ctx, r, d.plan(r, wait), wait, nil)
}

// A plan is the statement of one acquisition and what its hold needs.
type plan struct {
	sql  string
	args []any
	// key is the advisory key taken; a semaphore's try learns it from the
	// statement's second column.
	key    int64
	permit bool // the statement returns the key taken
	free   bool // the statement returns pg_advisory_unlock_shared's bool
	notify bool // the statement returns a notification's void
	// unlock releases key; when channel is set it also notifies channel
	// (with $2) and returns a second column.
	unlock  string
	channel string
}

// plan returns the statement that takes r's lock, waiting if wait is set
// (for a semaphore, only a try: see lockPermit).
func (d *Driver) plan(r driver.Request, wait bool) plan {
	st := &d.st
	pick := func(waiting, try string) string {
		if wait {
			return waiting
		}
		return try
	}
	row := rowName(r.Mode, r.Name)
	switch r.Mode {
	case driver.Read:
		k := ModeKey(st.table, r.Mode, r.Name, 0)
		return plan{sql: pick(st.lockShared, st.tryLockShared), args: []any{k, row}, key: k, unlock: st.unlockShared}
	case driver.Permit:
		ch := channelName(st.table, r.Mode, r.Name)
		return plan{sql: st.tryPermit, args: []any{permitKeys(st.table, r.Name, r.Limit), row}, permit: true, unlock: st.unlockPermit, channel: ch}
	case driver.Leader:
		k := ModeKey(st.table, r.Mode, r.Name, 0)
		ch := channelName(st.table, r.Mode, r.Name)
		return plan{sql: pick(st.lockLeader, st.tryLockLeader), args: []any{k, row, r.Value, ch}, key: k, notify: true, unlock: st.unlockLeader, channel: ch}
	}
	k := ModeKey(st.table, r.Mode, r.Name, 0) // Exclusive, Write
	return plan{sql: pick(st.lock, st.tryLock), args: []any{k, row}, key: k, unlock: st.unlock}
}

// run executes p on a connection of its own and makes that connection the
// holder when the lock was taken. A wait also ends, with errWoken, when
// wake (if not nil) is closed or receives.
func (d *Driver) run(ctx context.Context, r driver.Request, p plan, wait bool, wake <-chan struct{}) (driver.Grant, error) {
	for retried := false; ; retried = true {
		c, reused, err := d.get(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		token, woken, err := d.take(ctx, c, &p, wait, wake)
		switch {
		case err == nil && !c.cancelSent():
			return d.grant(c, r, p, token)
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
		case woken:
			return driver.Grant{}, errWoken
		case pgCode(err) == codeLockNotAvailable, wait && pgCode(err) == codeQueryCanceled:
			// The session's lock_timeout or statement_timeout (or an
			// operator's pg_cancel_backend) ended the wait.
			return driver.Grant{}, &driver.HeldError{Name: r.Name}
		case reused && !retried && dead:
			// An idle connection that had died (server restart, idle
			// timeout): try once more on a new one.
			continue
		}
		return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", modeWord(r.Mode), r.Name, hint(err, d.st.table))
	}
}

// errWoken ends a wait that a notification interrupted.
var errWoken = errors.New("pglock: wait interrupted by a notification")

// modeWord names a mode in errors ("lock" for the mutex).
func modeWord(m driver.Mode) string {
	if m == driver.Exclusive {
		return "mutex"
	}
	return m.String()
}

// take runs p's statement on c, which takes the lock and advances its
// token. pgx.ErrNoRows means that the lock was not taken; woken that wake
// interrupted the wait.
func (d *Driver) take(ctx context.Context, c *conn, p *plan, wait bool, wake <-chan struct{}) (token int64, woken bool, err error) {
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return 0, false, errClosed
		}
		d.waiting[c] = cancel // Close cancels the wait
		d.mu.Unlock()
		defer func() {
			d.mu.Lock()
			delete(d.waiting, c)
			d.mu.Unlock()
		}()
		if wake != nil {
			var fired atomic.Bool
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				select {
				case <-wake:
					fired.Store(true)
					cancel()
				case <-stop:
				}
			}()
			defer func() {
				close(stop)
				<-done
				woken = fired.Load()
			}()
		}
	}
	c.begin(wait)
	row := c.pg.QueryRow(ctx, p.sql, p.args...)
	switch {
	case p.free:
		var ok bool
		err = row.Scan(&ok)
	case p.permit:
		err = row.Scan(&token, &p.key)
	case p.notify:
		err = row.Scan(&token, nil)
	default:
		err = row.Scan(&token)
	}
	return token, false, err
}

// grant makes c the holder of the lock just taken.
func (d *Driver) grant(c *conn, r driver.Request, p plan, token int64) (driver.Grant, error) {
	period := d.keepalive
	if r.TTL > 0 {
		period = max(MinKeepalive, min(period, r.TTL/3))
	}
	h := newHold(d, c, r.Name, r.Owner, p.key, period)
	h.mode, h.unlock, h.channel = r.Mode, p.unlock, p.channel
	h.byTimer = d.timerKeeper.Load()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		c.close()
		return driver.Grant{}, errClosed
	}
	d.held[r.Owner] = h
	d.mu.Unlock()
	h.w.Start()
	if !d.noKeeper.Load() {
		go h.keep()
	}
	return driver.Grant{Token: uint64(token), Lost: h.lost, Check: h.Check}, nil
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
	if h := d.held[r.Owner]; h != nil && h.name == r.Name && h.mode == r.Mode {
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
