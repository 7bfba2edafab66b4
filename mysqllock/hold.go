package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sqlsession"
)

// maxSessionTimeout is the largest wait_timeout MySQL and MariaDB accept.
const maxSessionTimeout = 31536000 * time.Second

// restoreTimeout gives a connection back its own wait_timeout before it
// returns to the pool. (The server would take a NULL for its minimum, 1s.)
const restoreTimeout = "SET SESSION wait_timeout = COALESCE(@dlock_wait_timeout, @@GLOBAL.wait_timeout), @dlock_wait_timeout = NULL"

// sessionTimeout is the wait_timeout for a lock with the given TTL: the TTL
// rounded up to whole seconds, within the server's bounds.
func sessionTimeout(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1).Truncate(time.Second)
	return min(max(s, time.Second), maxSessionTimeout)
}

// seconds is a wait_timeout in whole seconds, as SQL.
func seconds(timeout time.Duration) string { return strconv.FormatInt(int64(timeout/time.Second), 10) }

// saveTimeout saves the session's wait_timeout and sets timeout.
func saveTimeout(timeout time.Duration) string {
	return "SET @dlock_wait_timeout = @@SESSION.wait_timeout, SESSION wait_timeout = " + seconds(timeout)
}

// check verifies, on the lock's session, that the server has the lock on
// that connection: IS_USED_LOCK of the key is its id.
func (d *Driver) check(h *hold) error {
	s := h.S
	switch err := s.Take(context.Background()); {
	case errors.Is(err, sqlsession.ErrEnded):
		return endedErr(h)
	case err != nil: // Take found the server gone, and ended the session
		return errNotHeld(h.Name, "the lock was lost", err)
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

// release runs RELEASE_LOCK on the lock's session, once no other
// statement runs there.
func (d *Driver) release(h *hold) error {
	s := h.S
	switch err := s.Take(context.Background()); {
	case errors.Is(err, sqlsession.ErrEnded):
		return endedErr(h)
	case err != nil: // Take found the server gone: the session, and its locks, ended
		return errNotHeld(h.Name, "the lock's connection had been closed by the server", err)
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
	// The connection failed, or its state is unknown: closing it frees
	// the lock (and the session's others) once the server reads the close.
	s.EndLost(fmt.Errorf("mysqllock: release %q failed, and took its connection with it: %w", h.Name, err))
	return errNotHeld(h.Name, "the lock's connection failed", err)
}

// endedErr says why h ended.
func endedErr(h *hold) error {
	why := h.Why()
	if errors.Is(why, driver.ErrReleased) {
		return errNotHeld(h.Name, "released", why)
	}
	return errNotHeld(h.Name, "the lock was lost", why)
}

// lookup returns the held lock of r, or nil.
func (d *Driver) lookup(r driver.Request) *hold {
	if h := d.pool.Held(r.Owner); h != nil && h.Name == r.Name {
		return h
	}
	return nil
}

// Refresh implements driver.Driver. A lock needs no renewal: it lives as
// long as its session, which the driver keeps alive. Refresh checks at
// once, on the lock's session, that the server still has the lock there
// (IS_USED_LOCK), and returns the zero time. When ctx ends first it
// returns ctx's error, and the check goes on: a cancelled statement would
// close the connection, and free every lock of the session.
func (d *Driver) Refresh(ctx context.Context, r driver.Request) (time.Time, error) {
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
// the release goes on (a cancelled statement would close the connection,
// and free every lock of the session).
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

// untilDone runs f, and returns its error, or ctx's when ctx ends first
// (f goes on to its end, in the background, and Close waits for it).
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
