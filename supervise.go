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

// supervise is the lease's one goroutine. It renews the lock about every
// TTL/3 (when automatic renewal is on), retries failed renewals until the
// lock's validity is about to end, then declares the lease lost; it also
// ends the lease when the driver signals loss. It stops when the lease
// ends or Release starts, and Release waits for it to stop before it
// unlocks, so no renewal ever follows a release.
func (s *Lease) supervise() {
	defer close(s.supDone)
	ttl := s.req.TTL
	margin := lossMargin(ttl)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var lastErr error
	for {
		exp := s.Expires()
		var wake <-chan time.Time
		if !exp.IsZero() {
			lossAt := exp.Add(-margin)
			next := lossAt
			if s.autoRenew {
				if lastErr == nil {
					next = exp.Add(-2 * ttl / 3)
				} else {
					next = time.Now().Add(renewRetryDelay(ttl))
				}
				if next.After(lossAt) {
					next = lossAt
				}
			}
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case <-s.supCtx.Done():
			return
		case <-s.lostCh:
			s.end(fmt.Errorf("%w: %q: the backend reported the lock lost", ErrLost, s.req.Name), true)
			return
		case <-wake:
		}

		exp = s.Expires() // a manual Refresh may have moved it
		lossAt := exp.Add(-margin)
		now := time.Now()
		if !now.Before(lossAt) {
			s.expire(lastErr)
			return
		}
		if !s.autoRenew || (lastErr == nil && now.Before(exp.Add(-2*ttl/3))) {
			continue
		}
		s.opMu.Lock()
		if s.supCtx.Err() != nil {
			s.opMu.Unlock()
			return
		}
		ctx, cancel := context.WithDeadline(s.supCtx, lossAt)
		err := s.refresh(ctx)
		cancel()
		s.opMu.Unlock()
		switch {
		case err == nil:
			lastErr = nil
		case errors.Is(err, ErrNotHeld) || s.supCtx.Err() != nil:
			return // refresh ended the lease, or Release started
		default:
			lastErr = err
			s.l.log.Warn("dlock: renewal failed", "name", s.req.Name, "token", s.token, "error", err)
		}
	}
}

// expire ends the lease as lost because its validity ran out without a
// successful renewal, then makes a best-effort, owner-checked unlock in
// case a late renewal did reach the store, so that others need not wait
// for the TTL. Drivers may rely on this call: a lock whose store does not
// expire it on its own (filelock's flock) is freed here when the lease's
// validity ends.
func (s *Lease) expire(lastErr error) {
	cause := fmt.Errorf("%w: %q: validity ended without a successful renewal", ErrLost, s.req.Name)
	if lastErr != nil {
		cause = fmt.Errorf("%w: %q: validity ended without a successful renewal: %w", ErrLost, s.req.Name, lastErr)
	}
	if !s.end(cause, true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.req.TTL/10, 50*time.Millisecond))
	defer cancel()
	s.opMu.Lock()
	_ = s.l.drv.Unlock(ctx, s.req)
	s.opMu.Unlock()
}
