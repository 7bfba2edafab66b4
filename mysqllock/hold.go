package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
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

// A hold is a lock the driver holds, on one of its sessions.
type hold struct {
	s           *session
	name, owner string
	key         string            // the server-side name
	notice      driver.LossNotice // Grant.OnLost: signalled when the hold ends
	// loss is why the lock was lost (or errReleasedCheck), set once before
	// the loss is signalled: what Check returns from then on.
	loss atomic.Pointer[error]

	ended bool // released or lost; guarded by Driver.mu
}

// errReleasedCheck is what Check says once the lock is released. dlock
// does not ask then; it is an error so that a released lock never looks
// held.
var errReleasedCheck = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrReleased)

// noteLoss records cause as the loss, unless one is already recorded,
// and returns the recorded one.
func (h *hold) noteLoss(cause error) error {
	h.loss.CompareAndSwap(nil, &cause)
	return *h.loss.Load()
}

// Check is the hold's Grant.Check: the loss, once known (the lock's or
// its session's); otherwise one non-blocking look at the idle
// connection's socket (none while a statement runs on it: the statement
// finds out). A look that finds the server gone ends the session as lost,
// from a goroutine of its own (closing the connection may block), after
// recording the loss so that this and every later Check report it.
// Nothing allocates while it returns nil.
func (h *hold) Check(time.Time) error {
	if p := h.loss.Load(); p != nil {
		return *p
	}
	s := h.s
	if p := s.loss.Load(); p != nil {
		return *p
	}
	v, errno := s.w.Look()
	if v != sockwatch.VGone {
		return nil
	}
	err := s.noteLoss(s.goneErr(errno))
	s.d.bg.Go(func() { s.lose(err) })
	return err
}

// check verifies, on the lock's session, that the server has the lock on
// that connection: IS_USED_LOCK of the key is its id.
func (h *hold) check() error {
	s := h.s
	switch err := s.take(context.Background()); {
	case errors.Is(err, errEnded):
		return h.endedErr()
	case err != nil: // take found the server gone, and ended the session
		return errNotHeld(h.name, "the lock was lost", err)
	}
	var holder sql.NullInt64
	err := s.query("SELECT IS_USED_LOCK("+literal(h.key)+")", &holder)
	switch {
	case err != nil:
		err = fmt.Errorf("mysqllock: %q: checking the lock failed, and took its connection with it: %w", h.name, err)
		s.endLost(err)
	case !holder.Valid:
		err = fmt.Errorf("mysqllock: %q: the server has the lock free, not held by connection %d", h.name, s.id)
		h.end(err)
	case holder.Int64 != s.id:
		err = fmt.Errorf("mysqllock: %q: the server has the lock on connection %d, not on the holder's, %d", h.name, holder.Int64, s.id)
		h.end(err)
	default:
		s.releaseUse()
		return nil
	}
	return errNotHeld(h.name, "the lock was lost", err)
}

// release runs RELEASE_LOCK on the lock's session, once no other
// statement runs there.
func (h *hold) release() error {
	s := h.s
	switch err := s.take(context.Background()); {
	case errors.Is(err, errEnded):
		return h.endedErr()
	case err != nil: // take found the server gone: the session, and its locks, ended
		return errNotHeld(h.name, "the lock's connection had been closed by the server", err)
	}
	var rel sql.NullInt64
	err := s.query("SELECT RELEASE_LOCK("+literal(h.key)+")", &rel)
	switch {
	case err == nil && rel.Valid && rel.Int64 == 1:
		h.loss.CompareAndSwap(nil, &errReleasedCheck)
		h.end(nil)
		return nil
	case err == nil:
		err = fmt.Errorf("mysqllock: %q: the server did not have the lock on its connection", h.name)
		h.end(err)
		return errNotHeld(h.name, "the lock was lost", err)
	}
	// The connection failed, or its state is unknown: closing it frees
	// the lock (and the session's others) once the server reads the close.
	s.endLost(fmt.Errorf("mysqllock: release %q failed, and took its connection with it: %w", h.name, err))
	return errNotHeld(h.name, "the lock's connection failed", err)
}

// end ends the hold alone, released (cause nil) or lost, on a session that
// lives on; the caller has the use of the session, which this gives back
// (or retires the session, when it holds nothing more).
func (h *hold) end(cause error) {
	d := h.s.d
	d.mu.Lock()
	delete(h.s.holds, h)
	d.endHoldLocked(h)
	d.mu.Unlock()
	if cause != nil {
		h.noteLoss(cause)
	}
	h.s.putBack(h.key)
	h.notice.Signal() // with the session given back: dlock runs here
}

// endedErr says why the hold ended.
func (h *hold) endedErr() error {
	if p := h.loss.Load(); p != nil && *p != errReleasedCheck {
		return errNotHeld(h.name, "the lock was lost", *p)
	}
	if p := h.s.loss.Load(); p != nil {
		return errNotHeld(h.name, "the lock was lost", *p)
	}
	return errNotHeld(h.name, "released", driver.ErrReleased)
}

// endHoldLocked forgets h, which has ended; Driver.mu is held.
func (d *Driver) endHoldLocked(h *hold) {
	if h.ended {
		return
	}
	h.ended = true
	if d.held[h.owner] == h {
		delete(d.held, h.owner)
	}
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

// forget removes h from the held locks.
func (d *Driver) forget(h *hold) {
	d.mu.Lock()
	if d.held[h.owner] == h {
		delete(d.held, h.owner)
	}
	d.mu.Unlock()
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
	return time.Time{}, d.untilDone(ctx, h.check)
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
	d.forget(h)
	err := d.untilDone(ctx, h.release)
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
