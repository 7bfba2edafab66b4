package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/dlockgo/dlock/driver"
)

// TryLock takes the lock with pg_try_advisory_lock on one of the
// driver's sessions, advancing the name's token in the same statement:
// one round trip when a session is at hand. When this driver (for another
// owner) or another session holds the lock, it returns a
// *driver.HeldError (Remaining 0: a session lock has no expiry).
func (d *Driver) TryLock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, false)
}

// Lock first tries the lock as TryLock does. When another session holds
// it, it waits on the server with pg_advisory_lock on a connection of its
// own, which then holds the lock; one Lock per key and driver waits on the
// server, the driver's others in the process behind it. When ctx ends
// first, the driver asks the server to cancel the wait, so that nothing
// stays queued, closes that connection and returns ctx's error.
func (d *Driver) Lock(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return d.acquire(ctx, r, true)
}

func (d *Driver) acquire(ctx context.Context, r driver.Request, wait bool) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	rq, err := d.resolve(r)
	if err != nil {
		return driver.Grant{}, err
	}
	q := &rq
	switch {
	case q.mode == driver.Permit && wait:
		return d.lockPermit(ctx, q)
	case q.mode == driver.Permit:
		return d.tryPermit(ctx, q)
	case wait:
		return d.lockKey(ctx, q)
	}
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return driver.Grant{}, errClosed
	case !d.reserveKeyLocked(q.key, q.mode):
		d.mu.Unlock()
		return driver.Grant{}, &driver.HeldError{Name: q.name}
	}
	d.mu.Unlock()
	g, err := d.tryOn(ctx, q, d.plan(q, false), []int64{q.key})
	if err != nil {
		d.dropKey(q.key)
	}
	return g, err
}

// dropKey is dropKeyLocked, taking Driver.mu.
func (d *Driver) dropKey(key int64) {
	d.mu.Lock()
	d.dropKeyLocked(key)
	d.mu.Unlock()
}

// lockKey is Lock for the kinds of one key: it waits in the process to be
// the key's one waiting Lock and for the driver's own holds of the key,
// then tries on a session, and waits on the server (see Lock).
func (d *Driver) lockKey(ctx context.Context, q *lockReq) (driver.Grant, error) {
	key := q.key
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
		if d.reserveKeyLocked(key, q.mode) {
			k.writer = false
			d.mu.Unlock()
			break
		}
		k.writer = q.mode != driver.Read
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
	g, err := d.tryOn(ctx, q, d.plan(q, false), []int64{key})
	if errors.Is(err, driver.ErrNotAcquired) {
		// Another session holds it: wait on the server.
		g, err = d.run(ctx, q, d.plan(q, true), true, nil)
	}
	if err != nil {
		d.dropKey(key)
	}
	return g, err
}

// A plan is the statement of one acquisition and what its hold needs.
type plan struct {
	sql    string
	args   []any
	key    int64 // the advisory key taken; a semaphore's try reads it back
	permit bool  // the statement returns the key taken
	free   bool  // the statement returns pg_advisory_unlock_shared's bool
	notify bool  // the statement returns a notification's void
	// unlock releases key; with channel set it also notifies channel
	// ($2) and returns a second column.
	unlock  string
	channel string
}

// plan returns the statement taking q's lock, waiting if wait is set (a
// semaphore's only tries: see lockPermit).
func (d *Driver) plan(q *lockReq, wait bool) plan {
	st := &d.st
	pick := func(waiting, try string) string {
		if wait {
			return waiting
		}
		return try
	}
	switch q.mode {
	case driver.Read:
		return plan{sql: pick(st.lockShared, st.tryLockShared), args: []any{q.key, q.row}, key: q.key, unlock: st.unlockShared}
	case driver.Permit:
		return plan{sql: st.tryPermit, args: []any{q.slots, q.row}, permit: true, unlock: st.unlockPermit, channel: q.channel}
	case driver.Leader:
		return plan{sql: pick(st.lockLeader, st.tryLockLeader), args: []any{q.key, q.row, q.value, q.channel}, key: q.key, notify: true, unlock: st.unlockLeader, channel: q.channel}
	}
	// Exclusive, Write
	return plan{sql: pick(st.lock, st.tryLock), args: []any{q.key, q.row}, key: q.key, unlock: st.unlock}
}

// tryOn runs p, a try, on a session not asked for the keys p may take,
// which becomes the holder if it took the lock. The statement runs under
// conn.bound; ctx bounds only the wait for the session.
func (d *Driver) tryOn(ctx context.Context, q *lockReq, p plan, keys []int64) (driver.Grant, error) {
	for retried := false; ; retried = true {
		s, err := d.pool.Session(ctx, q.period, keys...)
		if err != nil {
			return driver.Grant{}, err
		}
		reused := !s.Fresh() || s.C.reused
		s.C.bound()
		token, _, err := d.take(context.Background(), s.C, &p, false, nil)
		s.C.unbound()
		switch {
		case err == nil:
			return d.grantOn(s, q, p, token, keys)
		case errors.Is(err, pgx.ErrNoRows):
			s.Unreserve(keys...)
			return driver.Grant{}, &driver.HeldError{Name: q.name}
		case pgCode(err) != "" && !s.C.pg.IsClosed():
			// The server refused the statement and the session lives on,
			// but a session lock taken before the failure outlives the
			// statement's transaction: let go of the keys.
			if d.letGo(s.C, q.mode, keys) {
				s.Unreserve(keys...)
				if pgCode(err) == codeLockNotAvailable || pgCode(err) == codeQueryCanceled {
					return driver.Grant{}, &driver.HeldError{Name: q.name}
				}
				return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", q.word, q.name, hint(err, d.st.table))
			}
		}
		// Its state is unknown: end the session, freeing what it took.
		dead := s.C.pg.IsClosed() // pgx closed it: the session had failed
		s.EndLost(fmt.Errorf("pglock: the connection holding the lock failed: %w", err))
		switch {
		case d.isClosed():
			return driver.Grant{}, errClosed
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err()
		case reused && !retried && dead:
			// It had died (server restart, idle timeout): try another.
			continue
		}
		return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", q.word, q.name, hint(err, d.st.table))
	}
}

// letGo releases keys on c (in the caller's use) after a failed statement
// asked for them; false if that fails too.
func (d *Driver) letGo(c *conn, m driver.Mode, keys []int64) bool {
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

// grantOn makes the lock p took on s a hold of s, giving back its use.
func (d *Driver) grantOn(s *session, q *lockReq, p plan, token int64, keys []int64) (driver.Grant, error) {
	h := &hold{S: s, Name: q.name, Owner: q.owner, Key: p.key,
		X: lockInfo{mode: q.mode, unlock: p.unlock, channel: p.channel}}
	if err := d.pool.Adopt(h, keys...); err != nil {
		return driver.Grant{}, err
	}
	return h.Grant(uint64(token)), nil
}

// adoptedLocked counts a held permit's slot among the driver's keys (other
// kinds reserved theirs before asking).
func (d *Driver) adoptedLocked(h *hold) {
	if h.X.mode == driver.Permit {
		d.keyLocked(h.Key).n++
	}
}

// run executes p, a wait, on a connection of its own, then a session
// holding the lock; wake (if not nil) ends the wait with errWoken.
func (d *Driver) run(ctx context.Context, q *lockReq, p plan, wait bool, wake <-chan struct{}) (driver.Grant, error) {
	for retried := false; ; retried = true {
		c, reused, err := d.get(ctx)
		if err != nil {
			return driver.Grant{}, err
		}
		token, woken, err := d.take(ctx, c, &p, wait, wake)
		switch {
		case err == nil && !c.cancelSent():
			return d.grant(c, q, p, token)
		case errors.Is(err, pgx.ErrNoRows) && !c.cancelSent():
			d.put(c)
			return driver.Grant{}, &driver.HeldError{Name: q.name}
		}
		// Unknown state, or a cancel request on its way: close it.
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
			// lock_timeout, statement_timeout or pg_cancel_backend.
			return driver.Grant{}, &driver.HeldError{Name: q.name}
		case reused && !retried && dead:
			// It had died idle (server restart, idle timeout): try a new one.
			continue
		}
		return driver.Grant{}, fmt.Errorf("pglock: %s lock %q: %w", q.word, q.name, hint(err, d.st.table))
	}
}

// errWoken ends a wait that a notification interrupted.
var errWoken = errors.New("pglock: wait interrupted by a notification")

// take runs p's statement on c: pgx.ErrNoRows if not taken, woken if wake
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

// grant makes c, where a wait just took the lock, a session holding it.
func (d *Driver) grant(c *conn, q *lockReq, p plan, token int64) (driver.Grant, error) {
	c.session(q.period, true)
	s := d.pool.Init(new(session), c, q.period, p.key)
	return d.grantOn(s, q, p, token, []int64{p.key})
}

// A keyState is the driver's local record of one advisory key's holds and
// acquisitions under way: the driver never asks a session for a key it
// holds, answers a try at once when the key is taken here, and lets one
// Lock at a time wait on the server while the others wait here.
type keyState struct {
	n      int  // holds and acquisitions under way
	shared bool // all n are readers
	// writer is set while a Lock that conflicts with readers waits: a
	// reader's try then fails, as on the server behind a waiting writer.
	writer bool
	// gate is held by the key's one Lock that may wait; the others queue.
	gate    chan struct{}
	changed chan struct{} // if not nil, closed when n next drops
	refs    int           // Locks using gate
}

// conflicts reports whether mode m must wait for the driver's uses of the key.
func (k *keyState) conflicts(m driver.Mode) bool {
	if m == driver.Read {
		return k.writer || (k.n > 0 && !k.shared)
	}
	return k.n > 0
}

// reserveKeyLocked counts an acquisition of key in mode m, false on a conflict.
func (d *Driver) reserveKeyLocked(key int64, m driver.Mode) bool {
	k := d.keyLocked(key)
	if k.conflicts(m) {
		return false
	}
	if k.n == 0 {
		k.shared = true
	}
	k.n++
	k.shared = k.shared && m == driver.Read
	return true
}

// dropKeyLocked undoes one reserveKeyLocked (a hold ended, an acquisition
// failed) and wakes the Lock waiting for the key.
func (d *Driver) dropKeyLocked(key int64) {
	k := d.keys[key]
	if k == nil {
		return
	}
	k.n--
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
	d.tidyKeyLocked(key, k)
}

// keyLocked returns the state of key, made if needed; Driver.mu is held.
func (d *Driver) keyLocked(key int64) *keyState {
	k := d.keys[key]
	if k == nil {
		k, d.spareKey = d.spareKey, nil
		if k == nil {
			k = &keyState{}
		}
		d.keys[key] = k
	}
	return k
}

// tidyKeyLocked forgets k, key's unused state, keeping it as spareKey.
func (d *Driver) tidyKeyLocked(key int64, k *keyState) {
	if k.n != 0 || k.refs != 0 || k.writer {
		return
	}
	delete(d.keys, key)
	if d.spareKey == nil && k.changed == nil {
		k.shared = false
		d.spareKey = k // its gate, if any, is empty: no Lock uses it
	}
}
