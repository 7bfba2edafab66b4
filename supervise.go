package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A lease's life, from its grant to its end, is in this file. It ends in
// one place, end, from one of these:
//
//   - Err (and so every look at the lease) finds its validity over, or the
//     driver's Grant.Check reports the lock gone;
//   - tick, run by the lease's timer, does the same at the end of the
//     validity, and renews the lock about every TTL/3 until then;
//   - the driver calls lostSignalled (Grant.OnLost);
//   - a renewal or Release finds the lock gone on the store;
//   - Release releases it.
//
// Nothing runs between these events: a lease costs at most a timer (one
// with a TTL or a max hold) and no goroutine.

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

// start begins the lease's supervision.
func (s *Lease) start() {
	if s.expiring || s.maxHold > 0 {
		// Armed only once s.timer is set: tick may run at once and Reset it.
		s.timer = time.AfterFunc(time.Hour, s.tick)
		s.mu.Lock()
		s.arm()
		s.mu.Unlock()
	}
	if s.onLost != nil {
		s.onLost(s.lostSignalled)
	}
}

// errReleased is the end of a released lease, for Lease.fin.
var errReleased = ErrReleased

// end ends the lease once; it reports whether this call ended it. lost is
// why the lease was lost (lostExpired, lostGone, lostBackend), or "" for a
// release.
func (s *Lease) end(cause error, lost string) bool {
	p := &errReleased // a release, the common end, allocates nothing here
	if cause != ErrReleased {
		p = new(error)
		*p = cause
	}
	if !s.fin.CompareAndSwap(nil, p) {
		return false
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.l.track(s, false)
	s.l.m.ended(s.obs.ms, lost, time.Since(s.base))
	if lost != "" {
		s.traceLost(lost, cause)
		s.l.log.Error("dlock: lease lost", "name", s.req.Name, "token", s.token, "error", cause)
	}
	// Done closes last, so that whoever wakes on it sees the metrics and
	// the log line of the lease's end.
	close(s.done)
	return true
}

// expire ends the lease as lost because its validity ran out without a
// successful renewal, then unlocks it (endAndUnlock) in case a late
// renewal did reach the store, so that others need not wait for the TTL.
// Drivers may rely on this unlock: a lock whose store does not expire it
// (filelock's flock) is freed here. The unlock runs on a goroutine of its
// own, so that Err, which may call expire, never waits for the store.
func (s *Lease) expire() {
	s.mu.Lock()
	last := s.lastErr
	s.mu.Unlock()
	s.endAndUnlock(s.lostError("validity ended without a successful renewal", last), lostExpired)
}

// endMaxHold ends the lease as lost at its WithMaxHold and unlocks it, as
// expire does.
func (s *Lease) endMaxHold() {
	s.endAndUnlock(s.lostError(fmt.Sprintf("held for %v", s.maxHold), ErrMaxHold), lostMaxHold)
}

// endAndUnlock ends the lease as lost and, if this call ended it, makes a
// best-effort, owner-checked unlock after a renewal in flight returns,
// bounded as Close's releases are. The unlock is counted among what Close
// waits for before the lease ends: Close, woken by the end, cannot miss it.
func (s *Lease) endAndUnlock(cause error, lost string) {
	done := s.l.bg.Add()
	if !s.end(cause, lost) {
		done()
		return
	}
	go func() {
		defer done()
		s.opMu.Lock()
		defer s.opMu.Unlock()
		s.l.unlockBounded(context.Background(), s.req, "dlock: unlock after the lease's end failed", "token", s.token)
	}()
}

// lostError is the end of a lease lost for why: ErrLost, the lock's name,
// why, and cause (the driver's reason) when there is one.
func (s *Lease) lostError(why string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %q: %s", ErrLost, s.req.Name, why)
	}
	return fmt.Errorf("%w: %q: %s: %w", ErrLost, s.req.Name, why, cause)
}

// lostSignalled ends the lease as lost on the driver's Grant.OnLost,
// unless the lease ended or its release started first.
func (s *Lease) lostSignalled() {
	if s.fin.Load() != nil || s.releasing.Load() {
		return
	}
	var why error
	if s.check != nil {
		why = s.check(time.Now())
	}
	s.end(s.lostError("the backend reported the lock lost", why), lostBackend)
}

// tick is the supervision step, run by the lease's timer: it ends the
// lease at the end of its validity, renews it when a renewal is due, and
// arms the timer for the next step.
func (s *Lease) tick() {
	if s.Err() != nil {
		return // ended, possibly by this very look at the clock
	}
	s.mu.Lock()
	if s.releasing.Load() || s.renewing {
		s.mu.Unlock()
		return // Release stops supervision; a renewal re-arms when it returns
	}
	if !s.expiring || !s.autoRenew || (s.lastErr == nil && time.Now().Before(s.renewAt())) {
		s.arm()
		s.mu.Unlock()
		return
	}
	lossAt := s.lossAt()
	ctx, cancel := context.WithDeadline(context.Background(), lossAt)
	s.renewing, s.cancelOp = true, cancel
	// If the renewal outlasts the validity (a driver that does not return
	// when ctx ends, such as a Redis client without ContextTimeoutEnabled
	// on a silent connection), the timer's next tick ends the lease on
	// time all the same.
	s.timer.Reset(time.Until(lossAt))
	s.mu.Unlock()

	s.opMu.Lock()
	if s.releasing.Load() {
		// Release (or Detach) started while this tick waited for opMu, and
		// may have returned already: no renewal after it.
		s.opMu.Unlock()
		cancel()
		s.mu.Lock()
		s.renewing, s.cancelOp = false, nil
		s.mu.Unlock()
		return
	}
	err := s.renew(ctx)
	s.opMu.Unlock()
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewing, s.cancelOp = false, nil
	if s.releasing.Load() || s.fin.Load() != nil {
		return
	}
	s.lastErr = err
	if err != nil {
		s.l.log.Warn("dlock: renewal failed", "name", s.req.Name, "token", s.token, "error", err)
		s.traceRenewalFailed(err)
	}
	s.arm()
}

// renew calls the driver with opMu held and records the new validity; it
// ends the lease on ErrNotHeld.
func (s *Lease) renew(ctx context.Context) error {
	exp, err := s.l.drv.Renew(ctx, s.req)
	s.l.m.renewed(s.obs.ms, err == nil)
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			s.end(s.lostError("renewal found the lock gone", err), lostGone)
		}
		return fmt.Errorf("dlock: renew %q: %w", s.req.Name, err)
	}
	s.exp.Store(int64(exp.Sub(s.base)))
	return nil
}

// lossAt is when the lease counts as lost unless renewed.
func (s *Lease) lossAt() time.Time {
	return s.base.Add(time.Duration(s.exp.Load()) - s.margin)
}

// renewAt is when the next automatic renewal is due: a third of the TTL
// after the last success, or a short pause after a failure. s.mu is held.
func (s *Lease) renewAt() time.Time {
	if s.lastErr != nil {
		return time.Now().Add(renewRetryDelay(s.req.TTL))
	}
	return s.Expires().Add(-2 * s.req.TTL / 3)
}

// arm sets the timer for the next tick: the next renewal if one is due
// before the loss, else the loss, and no later than the maximum hold.
// s.mu is held.
func (s *Lease) arm() {
	var next time.Time
	if s.expiring {
		next = s.lossAt()
		if s.autoRenew {
			if r := s.renewAt(); r.Before(next) {
				next = r
			}
		}
	}
	if s.maxHold > 0 {
		if m := s.base.Add(s.maxHold); next.IsZero() || m.Before(next) {
			next = m
		}
	}
	s.timer.Reset(time.Until(next))
}
