package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A hold is a lock the driver holds: the connection whose session took it,
// and the keeper goroutine that checks the connection.
type hold struct {
	d     *Driver
	c     *conn
	name  string
	owner string
	mode  driver.Mode
	key   int64
	// unlock is the statement that releases key; with channel set, it
	// takes the channel as $2 and returns a second column.
	unlock  string
	channel string
	period  time.Duration // between two checks
	// timeout bounds one check; a check that takes longer counts as a
	// lost connection.
	timeout time.Duration
	lost    chan struct{} // Grant.Lost: closed when the hold ends
	stop    chan struct{} // closed when the hold ends: stops the keeper

	// use is a one-slot semaphore: whoever fills it may use c and the
	// fields below. Unlike a mutex, waiting for it can end with a context,
	// so that a release or a check never waits past its context for a
	// keep-alive check stuck on a silent server.
	use   chan struct{}
	ended bool  // released or lost: c is no longer the hold's
	cause error // why it was lost
}

func newHold(d *Driver, c *conn, name, owner string, key int64, period time.Duration) *hold {
	return &hold{
		d:       d,
		c:       c,
		name:    name,
		owner:   owner,
		key:     key,
		period:  period,
		timeout: max(period, time.Second),
		lost:    make(chan struct{}),
		stop:    make(chan struct{}),
		use:     make(chan struct{}, 1),
	}
}

func (h *hold) acquire()    { h.use <- struct{}{} }
func (h *hold) releaseUse() { <-h.use }

func (h *hold) acquireCtx(ctx context.Context) error {
	select {
	case h.use <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errEnded tells the keeper that the hold ended while it waited.
var errEnded = errors.New("pglock: hold ended")

// keep checks every period that the connection is alive, and ends the
// hold as lost when it is not. pg_terminate_backend, a server restart or
// a closed socket show in the next check as an error; a server or
// network that went silent, as a check that times out.
func (h *hold) keep() {
	t := time.NewTimer(h.period)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		if err := h.ping(); err != nil {
			if !errors.Is(err, errEnded) {
				h.lose(fmt.Errorf("pglock: %q: the connection holding the lock failed its keep-alive check: %w", h.name, err))
			}
			return
		}
		t.Reset(h.period)
	}
}

func (h *hold) ping() error {
	h.acquire()
	defer h.releaseUse()
	if h.ended {
		return errEnded
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	h.c.begin(false)
	return h.c.pg.PgConn().Ping(ctx)
}

// check verifies that the session still holds the lock.
func (h *hold) check(ctx context.Context) error {
	if err := h.acquireCtx(ctx); err != nil {
		return err
	}
	if h.ended {
		err := h.endedErr()
		h.releaseUse()
		return err
	}
	h.c.begin(false)
	var held bool
	err := h.c.pg.QueryRow(ctx, h.d.st.held, h.key).Scan(&held)
	h.releaseUse()
	switch {
	case err != nil:
		err = fmt.Errorf("pglock: %q: checking the lock failed, and took its connection with it: %w", h.name, err)
	case !held:
		err = fmt.Errorf("pglock: %q: the session no longer holds the lock", h.name)
	default:
		return nil
	}
	h.lose(err)
	return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
}

// release unlocks and gives the connection back to the driver.
func (h *hold) release(ctx context.Context) error {
	h.d.forget(h)
	if err := h.acquireCtx(ctx); err != nil {
		// A keep-alive check holds the connection (a silent server). End
		// the hold when it is done: closing the connection frees the lock.
		go h.lose(errors.New("pglock: released"))
		return fmt.Errorf("pglock: unlock %q: %w (the connection will be closed instead, which frees the lock once the server reads the close)", h.name, err)
	}
	if h.ended {
		err := h.endedErr()
		h.releaseUse()
		return err
	}
	h.ended = true
	close(h.stop)
	c := h.c
	c.begin(false)
	var ok bool
	var err error
	if h.channel != "" {
		err = c.pg.QueryRow(ctx, h.unlock, h.key, h.channel).Scan(&ok, nil)
	} else {
		err = c.pg.QueryRow(ctx, h.unlock, h.key).Scan(&ok)
	}
	h.releaseUse()
	defer close(h.lost)
	switch {
	case err == nil && ok:
		h.d.put(c)
		return nil
	case err == nil:
		c.close()
		return fmt.Errorf("%w: %q: the server says the session did not hold it", driver.ErrNotHeld, h.name)
	case ctx.Err() == nil && c.pg.IsClosed():
		// The session had ended (terminated, server restarted): its locks
		// went with it.
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.name, err)
	}
	c.close()
	return fmt.Errorf("pglock: unlock %q: %w (the connection was closed instead, which frees the lock once the server reads the close)", h.name, err)
}

// lose ends the hold as lost: it closes the connection (the server frees
// the lock, if it still has it, when it reads the close) and closes Lost.
func (h *hold) lose(cause error) {
	h.acquire()
	if h.ended {
		h.releaseUse()
		return
	}
	h.ended = true
	h.cause = cause
	close(h.stop)
	h.releaseUse()
	h.d.forget(h)
	h.c.close()
	close(h.lost)
}

// endedErr says why the hold ended; the caller has the use of h.
func (h *hold) endedErr() error {
	if h.cause == nil {
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, driver.ErrReleased)
	}
	return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, h.cause)
}
