package pglock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sqlsession"
)

// check verifies, on the lock's session, that the session still holds
// the lock.
func (d *Driver) check(ctx context.Context, h *hold) error {
	s := h.S
	switch err := s.Take(ctx); {
	case err == nil:
	case errors.Is(err, sqlsession.ErrEnded):
		return endedErr(h)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	default: // Take found the server gone, and ended the session
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
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
	default:
		s.Release()
		return nil
	}
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
}

// release unlocks on the lock's session. When ctx ends before the
// session is free (a keep-alive check stuck on a silent server), the
// unlock still runs once it is.
func (d *Driver) release(ctx context.Context, h *hold) error {
	s := h.S
	switch err := s.Take(ctx); {
	case err == nil:
	case errors.Is(err, sqlsession.ErrEnded):
		return endedErr(h)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		d.bg.Go(func() { // Close waits for it
			if s.Take(context.Background()) == nil {
				_ = unlockTaken(h)
			}
		})
		return fmt.Errorf("pglock: unlock %q: %w (the lock will be released once its connection is free, or freed with the connection)", h.Name, err)
	default:
		// Take found the server gone: the session, and its locks, ended.
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.Name, err)
	}
	return unlockTaken(h)
}

// unlockTaken runs the unlock statement; the caller has the use of the
// session, which this gives back.
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
		// The session had ended (terminated, server restarted): its locks
		// went with it.
		s.EndLost(fmt.Errorf("pglock: the connection holding the lock failed: %w", err))
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.Name, err)
	}
	s.EndLost(fmt.Errorf("pglock: unlock %q failed, and took its connection with it: %w", h.Name, err))
	return fmt.Errorf("pglock: unlock %q: %w (the connection was closed instead, which frees the lock once the server reads the close)", h.Name, err)
}

// endedErr says why h ended.
func endedErr(h *hold) error {
	return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.Name, h.Why())
}
