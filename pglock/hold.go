package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// A hold is a lock the driver holds, on one of its sessions.
type hold struct {
	s     *session
	name  string
	owner string
	mode  driver.Mode
	key   int64
	// unlock is the statement that releases key; with channel set, it
	// takes the channel as $2 and returns a second column.
	unlock  string
	channel string
	notice  driver.LossNotice // Grant.OnLost: signalled when the hold ends
	// loss is why the lock was lost, set (once) before the loss is signalled: what
	// Check returns from then on.
	loss atomic.Pointer[error]

	ended bool // released or lost; guarded by Driver.mu
}

// errReleasedCheck is what Check says after a release. dlock does not ask
// then; it is an error so that a released hold never looks held.
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

// check verifies, on the lock's session, that the session still holds
// the lock.
func (h *hold) check(ctx context.Context) error {
	s := h.s
	switch err := s.take(ctx); {
	case err == nil:
	case errors.Is(err, errEnded):
		return h.endedErr()
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	default: // take found the server gone, and ended the session
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
	}
	s.c.begin(false)
	var held bool
	s.bound()
	err := s.c.pg.QueryRow(context.Background(), s.d.st.held, h.key).Scan(&held)
	s.unbound()
	switch {
	case err != nil:
		err = fmt.Errorf("pglock: %q: checking the lock failed, and took its connection with it: %w", h.name, err)
		s.endLost(err)
	case !held:
		err = fmt.Errorf("pglock: %q: the session no longer holds the lock", h.name)
		h.end(err)
	default:
		s.releaseUse()
		return nil
	}
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
}

// release unlocks on the lock's session. When ctx ends before the
// session is free (a keep-alive check stuck on a silent server), the
// unlock still runs once it is.
func (h *hold) release(ctx context.Context) error {
	s := h.s
	switch err := s.take(ctx); {
	case err == nil:
	case errors.Is(err, errEnded):
		return h.endedErr()
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		s.d.bg.Go(func() { // Close waits for it
			if s.take(context.Background()) == nil {
				_ = h.unlockTaken()
			}
		})
		return fmt.Errorf("pglock: unlock %q: %w (the lock will be released once its connection is free, or freed with the connection)", h.name, err)
	default:
		// take found the server gone: the session, and its locks, ended.
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.name, err)
	}
	return h.unlockTaken()
}

// unlockTaken runs the unlock statement; the caller has the use of the
// session, which this gives back.
func (h *hold) unlockTaken() error {
	s := h.s
	c := s.c
	c.begin(false)
	var ok bool
	var err error
	ctx := context.Background() // bounded by s.bound
	s.bound()
	if h.channel != "" {
		err = c.pg.QueryRow(ctx, h.unlock, h.key, h.channel).Scan(&ok, nil)
	} else {
		err = c.pg.QueryRow(ctx, h.unlock, h.key).Scan(&ok)
	}
	s.unbound()
	switch {
	case err == nil && ok:
		h.loss.CompareAndSwap(nil, &errReleasedCheck)
		h.end(nil)
		return nil
	case err == nil:
		err = fmt.Errorf("pglock: %q: the server says the session did not hold it", h.name)
		h.end(err)
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
	case c.pg.IsClosed() && !pgconn.Timeout(err):
		// The session had ended (terminated, server restarted): its locks
		// went with it.
		s.endLost(fmt.Errorf("pglock: the connection holding the lock failed: %w", err))
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.name, err)
	}
	s.endLost(fmt.Errorf("pglock: unlock %q failed, and took its connection with it: %w", h.name, err))
	return fmt.Errorf("pglock: unlock %q: %w (the connection was closed instead, which frees the lock once the server reads the close)", h.name, err)
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
	h.s.putBack([]int64{h.key}, 1)
	h.notice.Signal() // with the session given back: dlock runs here
}

// endedErr says why the hold ended.
func (h *hold) endedErr() error {
	if p := h.loss.Load(); p != nil && *p != errReleasedCheck {
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, *p)
	}
	if p := h.s.loss.Load(); p != nil {
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, *p)
	}
	return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, driver.ErrReleased)
}
