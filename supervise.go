package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// lossMargin is how long before a lock's conservative expiry the lease is
// declared lost when no renewal succeeded: the holder must learn of the
// loss before the store can give the lock to another client.
func lossMargin(ttl time.Duration) time.Duration {
	return max(time.Millisecond, ttl/100)
}

// renewRetryDelay is the pause after a failed renewal before the next try.
func renewRetryDelay(ttl time.Duration) time.Duration {
	return clamp(ttl/30, 2*time.Millisecond, time.Second)
}

// start begins the lease's supervision. A lock that expires gets a timer
// whose callback, tick, renews it about every TTL/3 (when automatic renewal
// is on), retries failed renewals until the lock's validity is about to
// end, then declares the lease lost. A driver's loss signal gets a
// goroutine that waits for it. Nothing runs between these events: an
// uncontended lease costs no goroutine of its own.
func (s *Lease) start() {
	if exp := s.Expires(); !exp.IsZero() {
		// Armed only once s.timer is set: tick may run at once and Reset it.
		s.timer = time.AfterFunc(time.Hour, s.tick)
		s.timer.Reset(time.Until(s.nextWake(exp)))
	}
	if s.lostCh != nil {
		go s.watchLost()
	}
}

// stop ends supervision; a tick already running finds the lease ended or
// releasing and does nothing more.
func (s *Lease) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
}

// watchLost ends the lease when the driver signals loss, unless the lease
// ended or its release started first.
func (s *Lease) watchLost() {
	select {
	case <-s.lostCh:
	case <-s.done:
		return
	}
	s.mu.Lock()
	releasing := s.releasing
	s.mu.Unlock()
	if !releasing {
		s.end(fmt.Errorf("%w: %q: the backend reported the lock lost", ErrLost, s.req.Name), lostBackend)
	}
}

// nextWake returns when tick must next run for a lock valid until exp.
// opMu must be held, or the lease just created.
func (s *Lease) nextWake(exp time.Time) time.Time {
	ttl := s.req.TTL
	lossAt := exp.Add(-lossMargin(ttl))
	next := lossAt
	if s.autoRenew {
		if s.lastErr == nil {
			next = exp.Add(-2 * ttl / 3)
		} else {
			next = time.Now().Add(renewRetryDelay(ttl))
		}
		if next.After(lossAt) {
			next = lossAt
		}
	}
	return next
}

// tick is the supervision step, run by the lease's timer. It holds opMu
// throughout, so a Release waits for it and no renewal follows a release.
func (s *Lease) tick() {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	if s.err != nil || s.releasing {
		s.mu.Unlock()
		return
	}
	exp := s.expires // a manual Refresh may have moved it
	s.mu.Unlock()

	ttl := s.req.TTL
	lossAt := exp.Add(-lossMargin(ttl))
	now := time.Now()
	if !now.Before(lossAt) {
		s.expire()
		return
	}
	if s.autoRenew && (s.lastErr != nil || !now.Before(exp.Add(-2*ttl/3))) {
		ctx, cancel := context.WithDeadline(context.Background(), lossAt)
		s.mu.Lock()
		if s.releasing {
			s.mu.Unlock()
			cancel()
			return
		}
		s.cancelOp = cancel
		s.mu.Unlock()
		// A driver that does not return when ctx ends (a Redis client
		// without ContextTimeoutEnabled on a connection that stopped
		// answering) must not hold up the loss signal: at lossAt the
		// guard ends the lease, renewal in flight or not.
		last := s.lastErr
		guard := time.AfterFunc(time.Until(lossAt), func() {
			s.mu.Lock()
			releasing := s.releasing
			s.mu.Unlock()
			if !releasing {
				s.end(s.lostCause(last), lostExpired)
			}
		})
		err := s.refresh(ctx)
		if !guard.Stop() {
			// The guard ended the lease while the renewal hung. A late
			// renewal may have reached the store: unlock, as expire does.
			s.mu.Lock()
			s.cancelOp = nil
			s.mu.Unlock()
			cancel()
			s.unlockAfterLoss()
			return
		}
		s.mu.Lock()
		s.cancelOp = nil
		releasing := s.releasing
		s.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			s.lastErr = nil
		case errors.Is(err, ErrNotHeld) || releasing:
			return // refresh ended the lease, or Release started
		default:
			s.lastErr = err
			s.l.log.Warn("dlock: renewal failed", "name", s.req.Name, "token", s.token, "error", err)
		}
	}
	s.schedule()
}

// schedule arms the timer for the next tick unless the lease ended or is
// being released. opMu must be held.
func (s *Lease) schedule() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.releasing {
		return
	}
	s.timer.Reset(time.Until(s.nextWake(s.expires)))
}

// expire ends the lease as lost because its validity ran out without a
// successful renewal, then makes a best-effort, owner-checked unlock in
// case a late renewal did reach the store, so that others need not wait
// for the TTL. Drivers may rely on this call: a lock whose store does not
// expire it on its own (filelock's flock) is freed here when the lease's
// validity ends. opMu must be held.
func (s *Lease) expire() {
	if !s.end(s.lostCause(s.lastErr), lostExpired) {
		return
	}
	s.unlockAfterLoss()
}

// lostCause is the lease's end when its validity ran out without a
// successful renewal; last is the last renewal's error, if any.
func (s *Lease) lostCause(last error) error {
	if last != nil {
		return fmt.Errorf("%w: %q: validity ended without a successful renewal: %w", ErrLost, s.req.Name, last)
	}
	return fmt.Errorf("%w: %q: validity ended without a successful renewal", ErrLost, s.req.Name)
}

// unlockAfterLoss is expire's best-effort, owner-checked unlock. opMu must
// be held.
func (s *Lease) unlockAfterLoss() {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.req.TTL/10, 50*time.Millisecond))
	defer cancel()
	_ = s.l.drv.Unlock(ctx, s.req)
}
