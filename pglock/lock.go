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

// TryLock takes the lock with pg_try_advisory_lock on one of the
// driver's sessions, advancing the name's token in the same statement:
// one round trip when a session is at hand. When this driver holds the
// lock already (for another owner), or another session holds it, it
// returns a *driver.HeldError (Remaining is 0: a session lock has no
// expiry).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock first tries the lock as TryLock does: one round trip when it is
// free. When another session holds it, it waits with pg_advisory_lock,
// which waits on the server, on a connection of its own, which then
// holds the lock. One Lock per key and driver waits on the server; the
// driver's other Locks of that key wait in the process behind it. When
// ctx ends first, the driver asks the server to cancel the wait, so that
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
	switch {
	case r.Mode == driver.Permit && wait:
		return d.lockPermit(ctx, r)
	case r.Mode == driver.Permit:
		return d.tryPermit(ctx, r)
	case wait:
		return d.lockKey(ctx, r)
	}
	p := d.plan(r, false)
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return driver.Grant{}, errClosed
	case !d.reserveKeyLocked(p.key, r.Mode):
		d.mu.Unlock()
		return driver.Grant{}, &driver.HeldError{Name: r.Name}
	}
	d.mu.Unlock()
	g, err := d.tryOn(ctx, r, p, []int64{p.key})
	if err != nil {
		d.dropKey(p.key)
	}
	return g, err
}

// dropKey is dropKeyLocked for a caller without Driver.mu.
func (d *Driver) dropKey(key int64) {
	d.mu.Lock()
	d.dropKeyLocked(key)
	d.mu.Unlock()
}

// lockKey is Lock for the kinds of one key: it waits in the process
// until it is the key's one Lock that may wait, and until the driver's
// own holds of the key let it in, then tries the lock on a session, and
// waits on the server, on a connection of its own, when another session
// holds it.
func (d *Driver) lockKey(ctx context.Context, r driver.Request) (driver.Grant, error) {
	try := d.plan(r, false)
	key := try.key
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.Grant{}, errClosed
	}
	k := d.keyLocked(key)
	if k.gate == nil {
		k.gate = make(chan struct{}, 1)
	}
	k.refs++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		k.refs--
		d.tidyKeyLocked(key, k)
		d.mu.Unlock()
	}()
	select {
	case k.gate <- struct{}{}:
	case <-ctx.Done():
		return driver.Grant{}, ctx.Err()
	case <-d.life.Done():
		return driver.Grant{}, errClosed
	}
	defer func() { <-k.gate }()
	for {
		d.mu.Lock()
		if d.closed {
			k.writer = false
			d.mu.Unlock()
			return driver.Grant{}, errClosed
		}
		if d.reserveKeyLocked(key, r.Mode) {
			k.writer = false
			d.mu.Unlock()
			break
		}
		k.writer = r.Mode != driver.Read
		if k.changed == nil {
			k.changed = make(chan struct{})
		}
		changed := k.changed
		d.mu.Unlock()
		select {
		case <-changed:
			continue
		case <-ctx.Done():
		case <-d.life.Done():
		}
		d.mu.Lock()
		k.writer = false
		d.mu.Unlock()
		if ctx.Err() != nil {
			return driver.Grant{}, ctx.Err()
		}
		return driver.Grant{}, errClosed
	}
	g, err := d.tryOn(ctx, r, try, []int64{key})
	if errors.Is(err, driver.ErrNotAcquired) {
		// Another session holds it: wait on the server.
		g, err = d.run(ctx, r, d.plan(r, true), true, nil)
	}
	if err != nil {
		d.dropKey(key)
	}
	return g, err
}

// tryPermit takes a free permit of semaphore r.Name: the first slot,
// among those this driver does not hold, that no other session holds.
func (d *Driver) tryPermit(ctx context.Context, r driver.Request) (driver.Grant, error) {
	keys := permitKeys(d.st.table, r.Name, r.Limit)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return driver.Grant{}, errClosed
	}
	free := keys[:0]
	for _, k := range keys {
		if ks := d.keys[k]; ks == nil || ks.n == 0 {
			free = append(free, k)
		}
	}
	d.mu.Unlock()
	if len(free) == 0 {
		return driver.Grant{}, &driver.HeldError{Name: r.Name}
	}
	ch := channelName(d.st.table, r.Mode, r.Name)
	p := plan{sql: d.st.tryPermit, args: []any{free, rowName(r.Mode, r.Name)}, permit: true, unlock: d.st.unlockPermit, channel: ch}
	return d.tryOn(ctx, r, p, free)
}

// period is the keep-alive period of r's lock: Options.Keepalive, or a
// third of the TTL if that is shorter.
func (d *Driver) period(r driver.Request) time.Duration {
	if r.TTL > 0 {
		return max(MinKeepalive, min(d.keepalive, r.TTL/3))
	}
	return d.keepalive
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

// tryOn runs p, a try, on a session that is not asked for keys (the
// keys p may take), and makes the session the holder when the lock was
// taken. The statement runs under the session's own bound (sconn.bound),
// not ctx, which bounds only the wait for the session.
func (d *Driver) tryOn(ctx context.Context, r driver.Request, p plan, keys []int64) (driver.Grant, error) {
	period := d.period(r)
	for retried := false; ; retried = true {
		s, err := d.pool.Session(ctx, period, keys...)
		if err != nil {
			return driver.Grant{}, err
		}
		reused := !s.Fresh() || s.C.reused
		s.C.bound()
		token, _, err := d.take(context.Background(), s.C.conn, &p, false, nil)
		s.C.unbound()
		switch {
		case err == nil:
			return d.grantOn(s, r, p, token, keys)
		case errors.Is(err, pgx.ErrNoRows):
			s.Unreserve(keys...)
			return driver.Grant{}, &driver.HeldError{Name: r.Name}
		case pgCode(err) != "" && !s.C.pg.IsClosed():
			// The server refused the statement and the session lives on;
			// but a session lock taken before the statement failed
			// outlives the statement's transaction: let go of the keys.
			if d.letGo(s.C, r.Mode, keys) {
				s.Unreserve(keys...)
				if pgCode(err) == codeLockNotAvailable || pgCode(err) == codeQueryCanceled {
					return driver.Grant{}, &driver.HeldError{Name: r.Name}
				}
				return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", modeWord(r.Mode), r.Name, hint(err, d.st.table))
			}
		}
		// The connection's state is unknown: end the session, which frees
		// anything it took.
		dead := s.C.pg.IsClosed() // pgx closed it: the session had failed
		s.EndLost(fmt.Errorf("pglock: the connection holding the lock failed: %w", err))
		switch {
		case d.isClosed():
			return driver.Grant{}, errClosed
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err()
		case reused && !retried && dead:
			// A connection that had died (server restart, idle timeout):
			// try once more on another.
			continue
		}
		return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", modeWord(r.Mode), r.Name, hint(err, d.st.table))
	}
}

// letGo releases keys on c after a statement that asked for them failed;
// false when that failed too. The caller has the use of c's session.
func (d *Driver) letGo(c *sconn, m driver.Mode, keys []int64) bool {
	sql := d.st.letGo
	if m == driver.Read {
		sql = d.st.letGoShared
	}
	c.begin(false)
	c.bound()
	_, err := c.pg.Exec(context.Background(), sql, keys)
	c.unbound()
	return err == nil
}

// grantOn makes the lock that p just took on s for the keys it was asked
// for a hold of s; the caller has the use of s, which this gives back.
func (d *Driver) grantOn(s *session, r driver.Request, p plan, token int64, keys []int64) (driver.Grant, error) {
	h := &hold{S: s, Name: r.Name, Owner: r.Owner, Key: p.key,
		X: lockInfo{mode: r.Mode, unlock: p.unlock, channel: p.channel}}
	if err := d.pool.Adopt(h, keys...); err != nil {
		return driver.Grant{}, err
	}
	return h.Grant(uint64(token)), nil
}

// adoptedLocked counts a permit's slot among the driver's keys once it is
// held (other kinds reserved theirs before asking); Driver.mu is held.
func (d *Driver) adoptedLocked(h *hold) {
	if h.X.mode == driver.Permit {
		d.keyLocked(h.Key).n++
	}
}

// run executes p, a wait, on a connection of its own, and makes that
// connection a session holding the lock when it was taken. The wait also
// ends, with errWoken, when wake (if not nil) is closed or receives.
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

// grant makes c, on which a wait just took the lock, a session holding
// it: among the sessions later acquisitions may use.
func (d *Driver) grant(c *conn, r driver.Request, p plan, token int64) (driver.Grant, error) {
	period := d.period(r)
	s := d.pool.NewSession(d.sconn(c, period, true), period, p.key)
	return d.grantOn(s, r, p, token, []int64{p.key})
}

// Unlock releases the lock with pg_advisory_unlock on the session that
// holds it; a session left holding nothing goes back to the idle
// connections. It returns an error
// matching ErrNotHeld when r.Owner does not hold the lock through this
// driver, or the lock's session has ended. When ctx ends during the
// release, the unlock runs once the session is free (ctx bounds only the
// wait for the session, never a statement on it), and Close waits for it.
func (d *Driver) Unlock(ctx context.Context, r driver.Request) error {
	h := d.lookup(r)
	if h == nil {
		return fmt.Errorf("%w: %q is not held by owner %s through this driver", driver.ErrNotHeld, r.Name, r.Owner)
	}
	d.pool.Forget(h)
	return d.release(ctx, h)
}

// Refresh checks, on the lock's session, that the session still holds
// the lock (in pg_locks), and returns the zero time: a session lock needs
// no renewal. When the session no longer holds it, or the check fails
// (which leaves the connection unusable, so that the session's locks go
// with it), the lock is lost and Refresh returns an error matching ErrNotHeld. A ctx
// that is done before the check starts only returns its error.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
	h := d.lookup(r)
	if h == nil {
		return time.Time{}, fmt.Errorf("%w: %q is not held by owner %s through this driver", driver.ErrNotHeld, r.Name, r.Owner)
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, d.check(ctx, h)
}

// lookup returns the held lock of r, or nil.
func (d *Driver) lookup(r driver.Request) *hold {
	if h := d.pool.Held(r.Owner); h != nil && h.Name == r.Name && h.X.mode == r.Mode {
		return h
	}
	return nil
}
