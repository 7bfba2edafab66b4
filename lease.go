package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlockgo/dlock/driver"
)

// A Lease is a held lock: the handle Acquire and TryAcquire return. Release
// it when done, typically with defer.
//
// A lease ends exactly once: released by its holder, or lost (renewal could
// not succeed before the lock's validity ended, the session expired, or the
// store took the lock away). Done and Err tell which, in the manner of
// context.Context. A lock must not be assumed held after Done is closed;
// for work that must stop the moment the lock is lost, run it under
// Lease.Context.
//
// A Lease is safe for concurrent use. It must not be copied.
type Lease struct {
	l         *Locker
	req       driver.Request
	token     uint64
	acquired  time.Time
	autoRenew bool
	lostCh    <-chan struct{} // the driver's loss signal; may be nil

	done chan struct{}

	// timer runs tick, the lease's supervision, at the next renewal or at
	// the end of the lock's validity; nil for a lock without expiry.
	timer *time.Timer

	opMu    sync.Mutex // serializes the driver's Refresh and Unlock calls
	lastErr error      // the last failed automatic renewal; guarded by opMu

	mu        sync.Mutex
	expires   time.Time // zero: no expiry
	err       error     // nil while held
	releasing bool
	cancelOp  context.CancelFunc // aborts an automatic renewal in flight
}

func newLease(l *Locker, req driver.Request, g driver.Grant, autoRenew bool) *Lease {
	s := &Lease{
		l:         l,
		req:       req,
		token:     g.Token,
		acquired:  time.Now(),
		autoRenew: autoRenew,
		lostCh:    g.Lost,
		done:      make(chan struct{}),
		expires:   g.Expires,
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

// Owner returns the random value that identifies this acquisition on the
// store.
func (s *Lease) Owner() string { return s.req.Owner }

// TTL returns the lock's time to live on the store.
func (s *Lease) TTL() time.Duration { return s.req.TTL }

// Expires returns the latest instant at which the lock is certainly held
// unless it is renewed; the zero time for a lock that does not expire on
// its own (held while a session or process lives).
func (s *Lease) Expires() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expires
}

// Done returns a channel that is closed when the lease ends: released by
// its holder or lost. After Done is closed, Err says which.
func (s *Lease) Done() <-chan struct{} { return s.done }

// Err returns nil while the lease is held; afterwards an error matching
// ErrReleased or ErrLost (wrapping the backend's cause, if any).
func (s *Lease) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Context returns a copy of parent that is cancelled when the lease ends,
// with the lease's Err as the cause (context.Cause), or when parent ends.
// Run work that must stop the moment the lock is lost under this context.
// Call cancel to release the context's resources when the work is done.
func (s *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-s.done:
			cancel(s.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Refresh extends the lock to its TTL from now. Callers who turned
// automatic renewal off call it before the lease's Expires; with renewal
// on it is rarely needed. When the lock turns out to be gone, the lease
// ends as lost and Refresh returns an error matching ErrNotHeld and
// ErrLost. Other errors are transient: the lease stays held until its
// validity ends.
func (s *Lease) Refresh(ctx context.Context) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.heldErr(); err != nil {
		return err
	}
	err := s.refresh(ctx)
	if err != nil && errors.Is(err, ErrNotHeld) {
		return s.heldErr()
	}
	return err
}

// refresh calls the driver with opMu held; it ends the lease on ErrNotHeld.
func (s *Lease) refresh(ctx context.Context) error {
	exp, err := s.l.drv.Refresh(ctx, s.req)
	s.l.m.renewed(err == nil)
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			s.end(fmt.Errorf("%w: %q: renewal found the lock gone: %w", ErrLost, s.req.Name, err), lostGone)
		}
		return fmt.Errorf("dlock: refresh %q: %w", s.req.Name, err)
	}
	s.mu.Lock()
	s.expires = exp
	s.mu.Unlock()
	return nil
}

// Release releases the lock, only if this lease still holds it on the
// store, and ends the lease with ErrReleased. Renewal stops before the
// lock is released: no renewal runs after Release starts. Releasing a
// lease that already ended returns an error matching ErrNotHeld and the
// lease's Err (ErrReleased or ErrLost); it never touches the lock of
// another owner. If the store cannot be reached, the lease still ends and
// the store frees the lock when its TTL or session ends; the error says so.
func (s *Lease) Release(ctx context.Context) error {
	s.mu.Lock()
	if s.err != nil || s.releasing {
		s.mu.Unlock()
		return s.heldErr()
	}
	s.releasing = true
	cancel := s.cancelOp
	s.mu.Unlock()

	// Stop supervision, abort a renewal in flight, and wait for it (it holds
	// opMu): no renewal runs after this point.
	s.stop()
	if cancel != nil {
		cancel()
	}
	s.opMu.Lock()
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
		s.end(fmt.Errorf("%w: %q: the lock was gone at release: %w", ErrLost, s.req.Name, err), lostGone)
		return s.heldErr()
	default:
		s.end(ErrReleased, "")
		return fmt.Errorf("dlock: release %q (the store frees it when its TTL or session ends): %w", s.req.Name, err)
	}
}

// heldErr returns nil while held, else ErrNotHeld joined with why the lease
// ended.
func (s *Lease) heldErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, s.err)
	case s.releasing:
		return fmt.Errorf("%w: %w", ErrNotHeld, ErrReleased)
	}
	return nil
}

// end ends the lease once; it reports whether this call ended it. lost is
// why the lease was lost (lostExpired, lostGone, lostBackend), or "" for a
// release.
func (s *Lease) end(cause error, lost string) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = cause
	s.mu.Unlock()
	s.stop()
	s.l.track(s, false)
	s.l.m.ended(lost, time.Since(s.acquired))
	if lost != "" {
		s.l.log.Error("dlock: lease lost", "name", s.req.Name, "token", s.token, "error", cause)
	}
	// Done closes last, so that whoever wakes on it sees the metrics and
	// the log line of the lease's end.
	close(s.done)
	return true
}
