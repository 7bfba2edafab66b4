package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// A hold is a lock the driver holds: the connection whose session took it,
// the watch of that connection's socket, and the keeper goroutine that
// waits on the watch and pings the server.
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
	period  time.Duration // between two keep-alive pings
	// timeout bounds one ping; a ping that takes longer counts as a lost
	// connection.
	timeout time.Duration
	w       *sockwatch.Watch
	byTimer bool          // keep pings on the timer alone (Driver.timerKeeper)
	lost    chan struct{} // Grant.Lost: closed when the hold ends
	stop    chan struct{} // closed when the hold ends: stops the keeper
	// loss is why the lock was lost, set (once) before lost closes and
	// before the connection is closed: what Check returns from then on.
	loss atomic.Pointer[error]

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
		w:       c.newWatch(),
		lost:    make(chan struct{}),
		stop:    make(chan struct{}),
		use:     make(chan struct{}, 1),
	}
}

// acquire takes the use slot, and the socket from the watch, without a
// look (export_test's Occupy: a check stuck on a silent server);
// releaseUse gives both back.
func (h *hold) acquire() {
	h.use <- struct{}{}
	h.w.Pause()
}

func (h *hold) releaseUse() {
	h.w.Resume()
	<-h.use
}

// take takes the use slot, waiting for it at most until ctx ends (nil:
// no bound), for a query on the held connection, and then the socket
// from the watch with a look on the way (sockwatch.Take). A Check skips
// the socket while a query has it, so no query may start on a connection
// whose server has already hung up: a holder resumed from a pause, whose
// keep-alive check is due at once, would otherwise have every Check say
// "held" until that query failed. The error is ctx's, errEnded when the
// hold had already ended, or the loss when the look found the server
// gone, in which case take ended the hold as lost without a query. With
// a nil error the caller has the use of h and the socket until
// releaseUse.
func (h *hold) take(ctx context.Context) error {
	if ctx == nil {
		h.use <- struct{}{}
	} else {
		select {
		case h.use <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.ended {
		<-h.use
		return errEnded
	}
	if v, errno := h.w.Take(); v == sockwatch.VGone {
		return h.endLost(h.goneErr(errno))
	}
	return nil
}

// errEnded tells the keeper that the hold ended while it waited.
var errEnded = errors.New("pglock: hold ended")

// errReleasedCheck is what Check says after a release. dlock does not ask
// then; it is an error so that a released hold never looks held.
var errReleasedCheck = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrReleased)

// Check is the hold's Grant.Check: the loss, once known; otherwise one
// non-blocking look at the idle connection's socket (none while a query
// runs on it: the query finds out). A look that finds the server gone
// ends the hold as lost, from a goroutine of its own (closing the
// connection may block), after recording the loss so that this and every
// later Check report it. Nothing allocates while it returns nil.
func (h *hold) Check(time.Time) error {
	if p := h.loss.Load(); p != nil {
		return *p
	}
	v, errno := h.w.Look()
	if v != sockwatch.VGone {
		return nil
	}
	err := h.noteLoss(h.goneErr(errno))
	go h.lose(err)
	return err
}

// noteLoss records cause as the loss, unless one is already recorded,
// and returns the recorded one.
func (h *hold) noteLoss(cause error) error {
	h.loss.CompareAndSwap(nil, &cause)
	return *h.loss.Load()
}

// goneErr describes a socket that a look found closed or failing.
func (h *hold) goneErr(errno syscall.Errno) error {
	if errno != 0 {
		return fmt.Errorf("pglock: %q: the connection holding the lock failed: %w", h.name, errno)
	}
	return fmt.Errorf("pglock: %q: the server closed the connection holding the lock (its session ended, and the lock with it)", h.name)
}

// keep watches the idle connection and pings the server every period,
// and ends the hold as lost when either shows the connection gone. A
// terminated backend, a server shut down or a closed socket show on the
// socket at once; a server or network that went silent, as a ping that
// times out.
func (h *hold) keep() {
	if !h.w.Watched() || h.byTimer {
		h.keepByTimer()
		return
	}
	next := time.Now().Add(h.period)
	for {
		ev, errno := h.w.Wait(next)
		switch ev {
		case sockwatch.EvStopped:
			return
		case sockwatch.EvGone:
			h.lose(h.goneErr(errno))
			return
		case sockwatch.EvDeadline:
			next = time.Now().Add(h.period)
		}
		// A keep-alive ping, or a closer look at unsolicited bytes: pgx
		// reads them (a notice, a parameter status, a TLS record) and the
		// ping fails if the session ended.
		if err := h.ping(); err != nil {
			if !errors.Is(err, errEnded) {
				h.lose(fmt.Errorf("pglock: %q: the connection holding the lock failed its keep-alive check: %w", h.name, err))
			}
			return
		}
		if ev == sockwatch.EvData && h.stillData() {
			// Bytes pgx did not take (say, a background read of its own):
			// watching would wake at once again; ping on the timer until
			// the next deadline instead.
			if !h.sleepUntil(next) {
				return
			}
		}
	}
}

// stillData reports whether the socket shows bytes again right after a
// ping that should have read them.
func (h *hold) stillData() bool {
	v, _ := h.w.Look()
	return v == sockwatch.VData
}

// keepByTimer is keep for a socket that cannot be watched: a ping every
// period (each after a look: see take).
func (h *hold) keepByTimer() {
	for h.sleepUntil(time.Now().Add(h.period)) {
		if err := h.ping(); err != nil {
			if !errors.Is(err, errEnded) {
				h.lose(fmt.Errorf("pglock: %q: the connection holding the lock failed its keep-alive check: %w", h.name, err))
			}
			return
		}
	}
}

// sleepUntil waits until t; false when the hold ended first.
func (h *hold) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-h.stop:
		return false
	case <-timer.C:
		return true
	}
}

// ping sends a keep-alive ping on the held connection; errEnded when the
// hold ended before it (take may have ended it, having found the server
// gone: then there was nothing to ping).
func (h *hold) ping() error {
	if err := h.take(nil); err != nil {
		return errEnded
	}
	defer h.releaseUse()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	h.c.begin(false)
	return h.c.pg.PgConn().Ping(ctx)
}

// check verifies that the session still holds the lock.
func (h *hold) check(ctx context.Context) error {
	switch err := h.take(ctx); {
	case err == nil:
	case errors.Is(err, errEnded):
		return h.endedErrOf()
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err
	default: // take found the server gone, and ended the hold
		return fmt.Errorf("%w: %w", driver.ErrNotHeld, err)
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
	switch err := h.take(ctx); {
	case err == nil:
	case errors.Is(err, errEnded):
		return h.endedErrOf()
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// A keep-alive check holds the connection (a silent server). End
		// the hold when it is done: closing the connection frees the lock.
		go h.lose(errors.New("pglock: released"))
		return fmt.Errorf("pglock: unlock %q: %w (the connection will be closed instead, which frees the lock once the server reads the close)", h.name, err)
	default:
		// take found the server gone: the session, and its locks, ended.
		return fmt.Errorf("%w: %q: the session holding it has ended: %w", driver.ErrNotHeld, h.name, err)
	}
	h.ended = true
	h.loss.CompareAndSwap(nil, &errReleasedCheck)
	h.w.Stop() // paused by take: the watch never looks again
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
	<-h.use // not releaseUse: the watch stays stopped
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

// lose ends the hold as lost: it records the loss (for Check), closes
// Lost, then closes the connection (the server frees the lock, if it still
// has it, when it reads the close). Lost closes before the close because
// the holder must stop at once, whatever the close costs.
func (h *hold) lose(cause error) {
	cause = h.noteLoss(cause)
	h.use <- struct{}{}
	if h.ended {
		<-h.use
		return
	}
	h.endLost(cause)
}

// endLost is lose for a caller that has the use of h, which has not
// ended; it gives the use back, and returns the recorded loss.
func (h *hold) endLost(cause error) error {
	cause = h.noteLoss(cause)
	h.ended = true
	h.cause = cause
	h.w.Stop()
	close(h.stop)
	<-h.use
	h.d.forget(h)
	close(h.lost)
	h.c.close()
	return cause
}

// endedErrOf takes the use of h to say why it ended (see endedErr): for
// a caller that take told the hold had ended.
func (h *hold) endedErrOf() error {
	h.use <- struct{}{}
	defer func() { <-h.use }()
	return h.endedErr()
}

// endedErr says why the hold ended; the caller has the use of h.
func (h *hold) endedErr() error {
	if h.cause == nil {
		return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, driver.ErrReleased)
	}
	return fmt.Errorf("%w: %q: %w", driver.ErrNotHeld, h.name, h.cause)
}
