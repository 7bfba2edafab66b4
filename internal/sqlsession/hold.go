package sqlsession

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/sockwatch"
)

// A Hold is a lock held on a session; X is the backend's data besides Key.
type Hold[C Conn, K comparable, X any] struct {
	S     *Session[C, K, X]
	Name  string
	Owner string
	Key   K
	X     X

	notice driver.LossNotice // Grant.OnLost: signalled when the hold ends
	// loss (or errReleased), set once before the loss is signalled, is
	// what Check returns from then on.
	loss atomic.Pointer[error]

	ended bool // released or lost; guarded by the pool's mutex
}

// errReleased is Check's answer after a release, which dlock does not ask
// for, as an error so that a released hold never looks held.
var errReleased = fmt.Errorf("%w: %w", driver.ErrNotHeld, driver.ErrReleased)

// Grant returns the driver.Grant of h, with token.
func (h *Hold[C, K, X]) Grant(token uint64) driver.Grant {
	return driver.Grant{Token: token, OnLost: h.notice.Set, Check: h.Check}
}

// noteLoss records cause as the loss, unless one is already recorded.
func (h *Hold[C, K, X]) noteLoss(cause error) {
	h.loss.CompareAndSwap(nil, &cause)
}

// Check is the hold's Grant.Check: the loss once known (the lock's or its
// session's), else one non-blocking look at the socket (see
// sockwatch.Look). A look that finds the server gone records the loss, so
// that every later Check reports it, and ends the session as lost from a
// goroutine of its own (closing the connection may block). Nothing
// allocates while it returns nil.
func (h *Hold[C, K, X]) Check(time.Time) error {
	if p := h.loss.Load(); p != nil {
		return *p
	}
	s := h.S
	if p := s.loss.Load(); p != nil {
		return *p
	}
	v, errno := s.w.Look()
	if v != sockwatch.VGone {
		return nil
	}
	err := s.noteLoss(s.C.Gone(errno))
	s.p.bg.Go(func() { s.Lose(err) })
	return err
}

// Released is End(nil), and makes Check say released.
func (h *Hold[C, K, X]) Released() {
	h.loss.CompareAndSwap(nil, &errReleased)
	h.End(nil)
}

// End ends h alone, released (cause nil) or lost, on a session that lives
// on, giving back its use, which the caller has (see putBack).
func (h *Hold[C, K, X]) End(cause error) {
	s := h.S
	p := s.p
	p.mu.Lock()
	delete(s.holds, h)
	p.endLocked(h)
	p.mu.Unlock()
	if cause != nil {
		h.noteLoss(cause)
	}
	s.putBack([]K{h.Key}, 1)
	h.notice.Signal() // with the session given back: dlock runs here
}

// Why returns why h ended: its loss, or driver.ErrReleased.
func (h *Hold[C, K, X]) Why() error {
	if p := h.loss.Load(); p != nil && *p != errReleased {
		return *p
	}
	if err := h.S.Loss(); err != nil {
		return err
	}
	return driver.ErrReleased
}
