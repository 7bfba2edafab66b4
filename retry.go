package dlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before attempt number attempt (1 for the
// first retry) of a backend that cannot be notified of a release. Backends
// that wait by notification (Redis pub/sub, watches, server-side waits) do
// not use it.
type Backoff func(attempt int) time.Duration

// Default backoff bounds, used by DefaultBackoff.
const (
	DefaultMinBackoff = 2 * time.Millisecond
	DefaultMaxBackoff = 250 * time.Millisecond
)

// DefaultBackoff is ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff).
var DefaultBackoff = ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)

// ExponentialBackoff doubles the delay from min with each attempt, up to
// max, and draws the actual delay uniformly from [d/2, d] so that waiters
// do not retry in step.
func ExponentialBackoff(min, max time.Duration) Backoff {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return func(attempt int) time.Duration {
		d := min
		for i := 1; i < attempt && d < max; i++ {
			d *= 2
		}
		d = clamp(d, min, max)
		return d/2 + rand.N(d/2+1)
	}
}

// ConstantBackoff waits d, with ±10% jitter, before every attempt.
func ConstantBackoff(d time.Duration) Backoff {
	return func(int) time.Duration {
		j := d / 10
		return d - j + rand.N(2*j+1)
	}
}

// clamp returns d limited to [lo, hi].
func clamp(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// pause is the wait between the tries of a driver that cannot be
// notified, after try number attempt found the lock busy with err: the
// backoff, never past the holder's known expiry (err's *HeldError). It
// returns ctx's error when ctx ends first.
func pause(ctx context.Context, backoff Backoff, attempt int, err error) error {
	d := backoff(attempt)
	if held, ok := errors.AsType[*HeldError](err); ok && held.Remaining > 0 {
		d = min(d, held.Remaining)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
