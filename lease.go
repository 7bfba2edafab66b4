package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A Lease is one acquisition of a lock, as Acquire and TryAcquire return
// it. Release it when done, typically with defer.
//
// A lease ends exactly once: released by its holder, or lost (renewal could
// not succeed before the lock's validity ended, the session expired, or the
// store took the lock away). Err and Done tell which, in the manner of
// context.Context: Err decides when called, so check it right before each
// write to the protected resource; Done is for waking. Run work that must
// stop the moment the lock is lost under Lease.Context.
//
// A Lease is safe for concurrent use. It must not be copied.
type Lease struct {
	l         *Locker
	obs       *leaseObs // its metrics' attribute sets, and the caller's span
	req       driver.Request
	token     uint64
	autoRenew bool
	base      time.Time                 // the acquisition, on the monotonic clock: the origin of exp
	expiring  bool                      // the lock has a validity that renewal extends
	maxHold   time.Duration             // WithMaxHold: the longest hold, from base; 0 for none
	margin    time.Duration             // how long before exp the lease counts as lost
	check     func(now time.Time) error // the driver's Grant.Check; may be nil
	onLost    func(func())              // the driver's Grant.OnLost; may be nil
	done      chan struct{}

	fin       atomic.Pointer[error] // why the lease ended; nil while held
	exp       atomic.Int64          // the lock's validity, as a time.Duration since base
	releasing atomic.Bool           // Release has started

	// timer runs tick, the lease's supervision, at the next renewal or at
	// the end of the lock's validity; nil for a lock without expiry.
	timer *time.Timer

	opMu sync.Mutex // serializes the driver's Renew and Unlock calls

	mu       sync.Mutex // guards the renewal state below
	renewing bool
	lastErr  error              // the last failed automatic renewal
	cancelOp context.CancelFunc // aborts an automatic renewal in flight
}

func newLease(l *Locker, req driver.Request, g driver.Grant, obs *leaseObs, autoRenew bool, maxHold time.Duration) *Lease {
	s := &Lease{
		l:         l,
		obs:       obs,
		req:       req,
		token:     g.Token,
		autoRenew: autoRenew,
		base:      time.Now(),
		expiring:  !g.Expires.IsZero(),
		maxHold:   maxHold,
		margin:    lossMargin(req.TTL),
		check:     g.Check,
		onLost:    g.OnLost,
		done:      make(chan struct{}),
	}
	if s.expiring {
		s.exp.Store(int64(g.Expires.Sub(s.base)))
	}
	l.track(s, true)
	s.start()
	return s
}

// Mode returns the kind of lock the lease holds: driver.Exclusive for a
// mutex, driver.Read or driver.Write for a readers-writer lock,
// driver.Permit for a semaphore's permit, driver.Leader for leadership.
func (s *Lease) Mode() driver.Mode { return s.req.Mode }

// Name returns the lock's name.
func (s *Lease) Name() string { return s.req.Name }

// Token returns the fencing token: strictly greater than the token of every
// earlier acquisition of the same name on the same backend. Pass it to the
// protected resource so that it can reject a stale holder (see package
// fence).
func (s *Lease) Token() uint64 { return s.token }

// Owner returns the random value identifying this acquisition on the store.
func (s *Lease) Owner() string { return s.req.Owner }

// TTL returns the lock's time to live on the store.
func (s *Lease) TTL() time.Duration { return s.req.TTL }

// Expires returns the latest instant at which the lock is certainly held
// unless it is renewed; the zero time for a lock that does not expire on
// its own (held while a session or process lives).
func (s *Lease) Expires() time.Time {
	if !s.expiring {
		return time.Time{}
	}
	return s.base.Add(time.Duration(s.exp.Load()))
}

// Done returns a channel that is closed when the lease ends (released or
// lost: Err says which), once the lease's supervision notices, which needs
// the process to be scheduled: a holder resumed after a pause may find
// Done still open for a moment. Use Done to wake up, and Err to check.
func (s *Lease) Done() <-chan struct{} { return s.done }

// Err returns nil while the lease is held; afterwards an error matching
// ErrReleased or ErrLost (wrapping the backend's cause, if any).
//
// Err decides at the call, as the package doc's Guarantees say; when it
// finds the validity over, the lease ends as lost right there. It costs a
// clock read and does not allocate while the lease is held. What Err
// cannot see is a store that takes the lock away on its own before the
// holder next asks it: pass Lease.Token to the resource to cover it. See
// docs/GUARANTEES.md, The loss signal.
func (s *Lease) Err() error {
	if err := s.fin.Load(); err != nil {
		return *err
	}
	if s.releasing.Load() {
		return nil // Release decides how the lease ends
	}
	now := time.Now()
	switch {
	case s.maxHold > 0 && now.Sub(s.base) >= s.maxHold:
		s.endMaxHold()
	case s.expiring && now.Sub(s.base) >= time.Duration(s.exp.Load())-s.margin:
		s.expire()
	case s.check != nil:
		if err := s.check(now); err != nil {
			s.end(s.lostError("the backend reported the lock lost", err), lostBackend)
		}
	}
	if err := s.fin.Load(); err != nil {
		return *err
	}
	return nil
}

// Context returns a copy of parent that is cancelled when the lease ends,
// with the lease's Err as the cause (context.Cause), or when parent ends:
// run work that must stop the moment the lock is lost under it, and call
// cancel when the work is done. Its Err and context.Cause answer like the
// lease's Err, at the call, even before the lease's supervision has run;
// contexts derived from it learn of the loss when it is cancelled.
func (s *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return newHeldContext(parent, s.done, s.Err)
}

// Renew extends the lock to its TTL from now, for callers who turned
// automatic renewal off, before the lease's Expires. When the lock turns
// out to be gone, the lease ends as lost and Renew returns an error
// matching ErrNotHeld and ErrLost. Other errors are transient: the lease
// stays held until its validity ends.
func (s *Lease) Renew(ctx context.Context) error {
	// An ended lease answers without waiting for opMu, which its unlock
	// after a loss may hold for as long as the store takes to answer.
	if err := s.heldErr(); err != nil {
		return err
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.heldErr(); err != nil {
		return err
	}
	err := s.renew(ctx)
	if err != nil && errors.Is(err, ErrNotHeld) {
		return s.heldErr()
	}
	return err
}

// Release releases the lock, only if this lease still holds it on the
// store, and ends the lease with ErrReleased; no renewal runs after
// Release starts. Releasing a lease that already ended returns an error
// matching ErrNotHeld and the lease's Err, and never touches another
// owner's lock. If the store cannot be reached, the lease still ends and
// the store frees the lock when its TTL or session ends; the error says so.
func (s *Lease) Release(ctx context.Context) error {
	ctx, span := s.startRelease(ctx)
	err := s.release(ctx)
	endRelease(span, err)
	return err
}

// release is Release without its span.
func (s *Lease) release(ctx context.Context) error {
	if !s.stopSupervision() {
		return s.heldErr()
	}
	defer s.opMu.Unlock()
	err := s.l.drv.Unlock(ctx, s.req)
	switch {
	case err == nil:
		if !s.end(ErrReleased, "") {
			return s.heldErr() // lost while the release was starting
		}
		if s.l.log.Enabled(ctx, slog.LevelDebug) {
			s.l.log.DebugContext(ctx, "dlock: released", "name", s.req.Name, "token", s.token)
		}
		return nil
	case errors.Is(err, ErrNotHeld):
		s.end(s.lostError("the lock was gone at release", err), lostGone)
		return s.heldErr()
	default:
		s.end(ErrReleased, "")
		return fmt.Errorf("dlock: release %q (the store frees it when its TTL or session ends): %w", s.req.Name, err)
	}
}

// heldErr returns nil while held, else ErrNotHeld joined with the lease's end.
func (s *Lease) heldErr() error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	if s.releasing.Load() {
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrReleased)
	}
	return nil
}

// stopSupervision starts the lease's end by its holder (Release, Detach):
// it stops supervision, aborts a renewal in flight and waits for it, and
// returns with opMu held, so that no renewal runs after it. It reports
// false, with opMu not held, when the lease had ended or its end had
// started already.
func (s *Lease) stopSupervision() bool {
	if s.Err() != nil { // may end the lease, which takes s.mu: not under it
		return false
	}
	s.mu.Lock()
	if s.fin.Load() != nil || s.releasing.Load() {
		s.mu.Unlock()
		return false
	}
	s.releasing.Store(true)
	cancel := s.cancelOp
	s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	if cancel != nil {
		cancel()
	}
	s.opMu.Lock()
	return true
}
